"""Schedule compilers: every compiled XML (every runtime profile and oneCCL, all three collectives, a spread of
topologies) passes the validator and the CPU simulator with the exact collective result and realizes exactly
the schedule's number of communication steps; fused instructions and combined thread blocks take fewer XML
steps than the compiler before them; the fit search fits the runtimes' limits or refuses naming the limit."""
from __future__ import annotations

from functools import lru_cache

import pytest

from services.compiler import (PROFILES, CompileError, CompileOptions, check_xml, chunked_bfb, compile_schedule,
                               lower, runtime_defaults)
from services.compiler.check.msccl_parse import parse_msccl
from services.synthesis.search.construct import construct_collectives
from services.synthesis.schedule.cost import LinkModel, measured_tau
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective
from services.synthesis.schedule.verify import verify

TOPOLOGIES = ["torus(4, 4)", "circulant(7, 2, 3)", "circulant(12)", "hypercube(3)", "bipartite(4)",
              "genkautz(3, 12)", "line(bipartite(2))", "dcirculant(6, 1, 2, 3, 4)", "ring(5, 2)", "ring(8)"]
COLLECTIVES = list(ALLGATHER_FAMILY)
RUNTIMES = ["executor", "rccl", "legacy", "oneccl"]

# XML steps (all <step> elements, nops included) of the out-of-place RCCL files the compiler wrote before runtime
# profiles and fusion (separate send and receive thread blocks, s / r / rrc only)
BEFORE = {"ring(8)": (120, 112, 224), "torus(4, 4)": (714, 974, 1730), "circulant(7, 2, 3)": (119, 140, 264),
          "circulant(12)": (315, 403, 757), "hypercube(3)": (152, 208, 368), "bipartite(4)": (168, 238, 420),
          "genkautz(3, 12)": (276, 174, 454), "line(bipartite(2))": (152, 176, 334),
          "dcirculant(6, 1, 2, 3, 4)": (102, 168, 288), "ring(5, 2)": (85, 80, 160)}


@lru_cache(maxsize=None)
def built(expr: str):
    return construct_collectives(expr)


def sched(expr: str, c: Collective):
    r = built(expr)[c]
    return r.schedule, r.topology


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_compiled_xml_is_accepted(expr, runtime):
    """Every file passes the checker of its runtime's profile and the simulator (with the runtime's
    connection buffering), in every mode it declares, with exactly the schedule's communication steps."""
    fmt = "oneccl" if runtime == "oneccl" else "msccl"
    for c in COLLECTIVES:
        s, topo = sched(expr, c)
        art = compile_schedule(s, topo, runtime=runtime)
        rep = check_xml(art.xml, fmt, runtime=None if fmt == "oneccl" else runtime)
        assert rep.ok, (expr, c, runtime, rep.error)
        assert rep.collective == c.value
        assert art.lowering == "exact" and art.loss == 0.0 and art.tau_ratio == 1.0
        assert art.steps == s.steps == rep.comm_steps
        expected = {"out": ["out-of-place"], "in": ["in-place"], "both": ["out-of-place", "in-place"]}
        assert rep.simulated == expected[runtime_defaults(runtime, c.value)["inplace"]]
        if fmt == "msccl":
            assert art.xml_steps == rep.xml_steps and art.max_tb_steps <= PROFILES[runtime].max_steps
            assert art.threadblocks <= PROFILES[runtime].max_tbs
            assert art.xml_threadblocks == art.xml_data.count(b"<tb ")
            assert art.xml_dependent_steps == art.xml_data.count(b'hasdep="1"')


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_fewer_xml_steps_than_before(expr):
    """Fused instructions (rcs, rrs, rrcs) in one thread block per (peer pair, channel): never more XML steps
    than the compiler before them, fewer wherever a received range is forwarded unchanged."""
    for c, before in zip(COLLECTIVES, BEFORE[expr]):
        s, topo = sched(expr, c)
        art = compile_schedule(s, topo, runtime="rccl", inplace="out")
        assert art.xml_steps <= before, (c, art.xml_steps, before)
        if art.fused:
            assert art.xml_steps < before and art.combined


def test_ring_allreduce_matches_msccl_tools():
    """msccl-tools' ring allreduce on 8 gpus: 15 steps per gpu (s, 6 rrs, rrcs, 6 rcs, r) in one thread block,
    120 in all."""
    s, topo = sched("ring(8)", Collective.ALLREDUCE)
    for runtime in ("executor", "rccl", "legacy"):
        art = compile_schedule(s, topo, runtime=runtime)
        assert art.xml_steps <= 120 and art.threadblocks == 1 and art.max_tb_steps == 15
        assert {'type="rrcs"', 'type="rcs"'} <= {t for t in ('type="rrcs"', 'type="rcs"', 'type="rrs"') if t in art.xml}
        assert check_xml(art.xml, runtime=runtime).ok


@pytest.mark.parametrize("expr", ["torus(4, 4)", "genkautz(3, 12)", "line(bipartite(2))", "ring(5, 2)"])
def test_modes(expr):
    """out, in and both (one file for both kinds of call, checked both ways) on the executor; oneCCL in place."""
    for c in COLLECTIVES:
        s, topo = sched(expr, c)
        for mode, simulated in (("out", ["out-of-place"]), ("in", ["in-place"]),
                                ("both", ["out-of-place", "in-place"])):
            art = compile_schedule(s, topo, runtime="executor", inplace=mode)
            rep = check_xml(art.xml, runtime="executor")
            assert rep.ok and rep.simulated == simulated and rep.comm_steps == s.steps, (c, mode, rep.error)
            assert f'inplace="{int(mode != "out")}" outofplace="{int(mode != "in")}"' in art.xml
        one = compile_schedule(s, topo, runtime="oneccl", inplace=True)
        rep = check_xml(one.xml, "oneccl")
        assert rep.ok and rep.simulated == ["in-place"] and rep.comm_steps == s.steps


@pytest.mark.parametrize("expr", ["torus(4, 4)", "circulant(12)", "bipartite(4)", "line(bipartite(2))"])
def test_consolidation_cuts_messages(expr):
    for c in COLLECTIVES:
        s, topo = sched(expr, c)
        plain = compile_schedule(s, topo, runtime="rccl", consolidate=False, combined=False)
        cons = compile_schedule(s, topo, runtime="rccl", consolidate=True, combined=False)
        rep = check_xml(cons.xml, runtime="rccl")
        assert rep.ok and rep.comm_steps == s.steps, rep.error
        assert cons.consolidated and cons.messages < plain.messages
        assert ' type="cpy"' in cons.xml
        # at most one message per link, step and shard (the cnt limit is not hit here)
        shards = len(set(zip(s.step_of.tolist(), s.sender.tolist(), s.receiver.tolist(), s.lane.tolist(),
                             s.source.tolist())))
        assert cons.messages <= shards


def test_separate_thread_blocks_need_no_buffering():
    """Separate send and receive thread blocks run even when a send completes only at its matching receive
    (every connection's receives follow its sends, every dependency points to an earlier phase)."""
    for expr in ["torus(4, 4)", "bipartite(4)", "dcirculant(6, 1, 2, 3, 4)"]:
        for c in COLLECTIVES:
            s, topo = sched(expr, c)
            for cons in (False, True):
                art = compile_schedule(s, topo, combined=False, consolidate=cons)
                rep = check_xml(art.xml, fifo=0)
                assert rep.ok, (expr, c, cons, rep.error)


def test_instances_and_channels():
    s, topo = sched("torus(4, 4)", Collective.ALLREDUCE)
    art = compile_schedule(s, topo, instances=2, channels=1)
    assert art.instances == 2 and art.chunks == s.grid and art.chunks_per_loop == 16 * s.grid * 2
    assert 'nchannels="2"' in art.xml and 'nchunksperloop="%d"' % (16 * s.grid * 2) in art.xml
    rep = check_xml(art.xml)
    assert rep.ok and rep.comm_steps == s.steps
    spread = compile_schedule(s, topo, channels=4)
    assert spread.nchannels == 4 and check_xml(spread.xml).ok
    s, topo = sched("ring(5, 2)", Collective.ALLGATHER)              # parallel arcs get their own channels
    art = compile_schedule(s, topo, instances=3, channels=1)
    assert 'nchannels="6"' in art.xml and check_xml(art.xml).ok


def test_msccl_xml_shape():
    s, topo = sched("bipartite(4)", Collective.REDUCESCATTER)
    art = compile_schedule(s, topo)
    lines = art.xml.splitlines()
    assert lines[0].startswith("<!-- fabricplan runtime=executor") and lines[0].endswith("-->")
    first = lines[1]
    for attr in ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                 "minBytes", "maxBytes"):
        assert f' {attr}="' in first
    assert 'coll="reducescatter"' in first and 'maxBytes="0"' in first
    algo, profile, errors, _ = parse_msccl(art.xml)
    assert not errors and profile.name == "executor"
    n, P = s.nodes, s.grid
    assert algo.nchunksperloop == n * P
    for g in algo.gpus:
        assert (g.i_chunks, g.o_chunks) == (n * P, P)
        assert len({(tb.send, tb.recv, tb.chan) for tb in g.tbs}) == len(g.tbs)
        for tb in g.tbs:
            for st in tb.steps:
                if st.type == "nop":
                    assert st.depid >= 0
    legacy = compile_schedule(s, topo, runtime="legacy")
    assert 'coll="reduce_scatter"' in legacy.xml and "outofplace" not in legacy.xml
    assert f'maxBytes="{1 << 27}"' in legacy.xml
    assert check_xml(legacy.xml).ok and check_xml(legacy.xml).dialect == "legacy"


def test_artifact_api_and_predicted_time():
    s, topo = sched("hypercube(3)", Collective.ALLREDUCE)
    link = LinkModel.from_units(10, 100)
    art = compile_schedule(s, topo, "msccl", check=True, link=link, sizes=[1 << 20])
    d = art.as_dict()
    for key in ("fmt", "collective", "topology", "nodes", "steps", "chunks", "chunks_per_loop", "loss", "tau_ratio",
                "lowering", "runtime", "threadblocks", "max_tb_steps", "xml_steps", "messages", "xml_bytes",
                "attempts", "predicted_time_us", "schedule_time_us", "options"):
        assert key in d
    assert "xml" not in d and "xml" in art.as_dict(with_xml=True)
    assert art.predicted_time_us["1048576"] == pytest.approx(link.time(s.steps, measured_tau(s, 3), 1 << 20) * 1e6)
    assert art.predicted_time_us == art.schedule_time_us                 # exact lowering: no cost
    # BFB on uniform links: the dependency-driven time (what the XML realises) is the step-synchronous price
    assert art.predicted_barrier_time_us["1048576"] == pytest.approx(art.predicted_time_us["1048576"], rel=1e-12)
    one = compile_schedule(s, topo, runtime="oneccl")
    assert one.fmt == "oneccl" and one.runtime == "oneccl" and one.xml.count('<sync step="') == s.steps * s.nodes
    for bad in ({"fmt": "nccl"}, {"runtime": "nope"}, {"proto": "fast"}, {"inplace": "sideways"},
                {"channels": 33}, {"instances": 0}, {"runtime": "legacy", "max_bytes": 0},
                {"runtime": "legacy", "inplace": "both"}, {"min_bytes": 10, "max_bytes": 5}):
        with pytest.raises(CompileError):
            compile_schedule(s, topo, **bad)
    assert check_xml(art.xml).as_dict()["ok"]


def test_compile_options_key():
    a = CompileOptions("executor")
    assert a.key() == "executor" and CompileOptions("executor", channels=4).key() == "executor;channels=4"
    assert a.resolved("allreduce").inplace == "both" and CompileOptions("legacy").resolved("allgather").inplace == "out"


# ----- lowering ------------------------------------------------------------------------------------------
def test_lowering_exact_and_chunked():
    s, topo = sched("torus(4, 4)", Collective.ALLGATHER)
    exact = lower(s, topo)
    assert exact.method == "exact" and exact.schedule is s and exact.loss == 0
    low = lower(s, topo, max_chunks=2)
    assert low.method == "chunked-bfb" and low.chunks == 2 and low.schedule.grid == 2
    assert low.tau == measured_tau(low.schedule, topo.degree) > exact.tau
    assert low.loss == pytest.approx(float(low.tau / exact.tau) - 1) and low.loss > 0
    assert verify(low.schedule, topo).ok
    with pytest.raises(CompileError) as e:
        lower(s, topo, max_chunks=2, allow_resolve=False)
    assert e.value.limit == "max_chunks" and e.value.value == 4
    with pytest.raises(CompileError) as e:
        lower(s, topo, instances=4, max_chunks=16, max_buffer_chunks=32)
    assert e.value.limit == "max_offset"


@pytest.mark.parametrize("c", COLLECTIVES)
def test_chunked_fallback_compiles(c):
    s, topo = sched("torus(4, 4)", c)
    for runtime in ("executor", "oneccl"):
        art = compile_schedule(s, topo, runtime=runtime, max_chunks=2)
        assert art.lowering == "chunked-bfb" and art.chunks == 2 and art.loss > 0 and art.warnings
        rep = check_xml(art.xml, art.fmt)
        assert rep.ok and rep.comm_steps == art.steps == s.steps
    assert verify(chunked_bfb(topo, c, 3), topo).ok


def test_line_graph_fallback_reports_steps():
    s, topo = sched("line(dcirculant(4, 1, 2))", Collective.ALLGATHER)       # its schedule splits shards in two
    art = compile_schedule(s, topo, max_chunks=1)
    assert art.lowering == "chunked-bfb" and art.original_steps == s.steps
    assert check_xml(art.xml).comm_steps == art.steps


# ----- fit, don't fail -------------------------------------------------------------------------------------
def test_step_limit_is_fitted_with_more_channels():
    """A runtime built with fewer steps per thread block: the search spreads the links over more channels."""
    s, topo = sched("torus(4, 4)", Collective.ALLREDUCE)
    plain = compile_schedule(s, topo, channels=1, inplace="out")
    limit = max(4, plain.max_tb_steps // 2)
    art = compile_schedule(s, topo, max_steps=limit, inplace="out")
    assert art.max_tb_steps <= limit and art.lowering == "exact" and art.loss == 0
    assert any(not a["ok"] and a["limit"] == "max_steps" for a in art.attempts) and art.attempts[-1]["ok"]
    rep = check_xml(art.xml, max_steps=limit)
    assert rep.ok and rep.comm_steps == s.steps
    with pytest.raises(CompileError) as e:          # pinned to one channel and one layout: refused, naming it
        compile_schedule(s, topo, max_steps=limit, channels=1, combined=False, consolidate=False, inplace="out")
    assert e.value.limit == "max_steps" and "MSCCL_MAX_NUM_STEPS" in str(e.value) and e.value.attempts


def test_rccl_thread_block_case_is_fitted():
    """hypercube(6) allgather on RCCL with 6 channels needed 72 thread blocks (RCCL allows 64): combined
    thread blocks (or another layout) fit it, and the file passes RCCL's checker."""
    s, topo = sched("hypercube(6)", Collective.ALLGATHER)
    art = compile_schedule(s, topo, runtime="rccl", channels=6, simulate=False)
    assert art.threadblocks <= 64 and art.max_tb_steps <= 64
    rep = check_xml(art.xml, runtime="rccl")
    assert rep.ok and rep.comm_steps == s.steps, rep.error


def test_parser_node_limit_refuses_quickly():
    """When no program fits the XML parser's node budget, the error names MAX_NODES."""
    s, topo = sched("torus(4, 4)", Collective.ALLREDUCE)
    tiny = PROFILES["executor"].with_overrides(max_parser_nodes=40)
    with pytest.raises(CompileError) as e:
        compile_schedule(s, topo, runtime=tiny, max_chunks=1)
    assert e.value.limit == "max_parser_nodes" and "MAX_NODES" in str(e.value)


def test_blocks_per_channel_limit():
    r = construct_collectives("complete(34)")[Collective.ALLGATHER]
    with pytest.raises(CompileError) as e:
        compile_schedule(r.schedule, r.topology, channels=1, simulate=False)
    assert e.value.limit == "max_tbs_per_channel" and e.value.maximum == 32


def test_baseline_schedules_compile():
    """Schedules not built by BFB: a pipelined double binary tree (reduce + broadcast, parallel arcs) and the
    classic torus. MSCCL has no global step barrier, so its realized depth can only be shorter than the
    synchronous step count (pipelined chunks overlap); oneCCL syncs every step."""
    from services.synthesis.evaluate import baselines

    dbt = baselines.double_binary_tree(8)
    s = dbt.schedule(2, Collective.ALLREDUCE)
    for runtime in ("executor", "oneccl"):
        art = compile_schedule(s, dbt.topology, runtime=runtime)
        rep = check_xml(art.xml, art.fmt)
        assert rep.ok, rep.error
        assert rep.comm_steps <= s.steps if runtime != "oneccl" else rep.comm_steps == s.steps
    tc = baselines.torus_classic(4, 4)
    for c in COLLECTIVES:
        s = tc.schedule(c)
        for runtime in ("executor", "legacy", "oneccl"):
            art = compile_schedule(s, tc.topology, runtime=runtime)
            rep = check_xml(art.xml, art.fmt)
            assert rep.ok and rep.comm_steps == s.steps, (c, runtime, rep.error)


def test_redundant_delivery_is_left_out():
    """A (valid, if wasteful) allgather where node 1's shard reaches node 0 twice: the second delivery carries
    nothing new, so the program leaves it out (and says so)."""
    from fractions import Fraction as F

    from services.synthesis.topology.catalog import build
    from services.synthesis.schedule.ir import Schedule

    topo = build("complete(3)")
    whole = (F(0), F(1))
    tuples = [((v, whole), (v, w), 1) for v in range(3) for w in range(3) if w != v]
    tuples += [((1, whole), (1, 0), 2), ((1, whole), (0, 2), 2)]
    s = Schedule.from_tuples(Collective.ALLGATHER, 3, tuples, topology=topo.expr)
    assert verify(s, topo).ok
    for runtime in ("executor", "oneccl"):
        art = compile_schedule(s, topo, runtime=runtime)
        rep = check_xml(art.xml, art.fmt)
        assert rep.ok, rep.error
    art = compile_schedule(s, topo)
    assert art.dropped_units == 2 and art.warnings


def test_rccl_genkautz_allreduce_is_fitted():
    """genkautz(4, 256) allreduce on RCCL (64 steps and 64 thread blocks, msccl_struct.h:16/18): the program on
    one channel needs more than 64 steps per thread block (the old compiler wrote 96 and RCCL rejected it); the
    fit search spreads it over channels within both limits, or refuses naming the limit when pinned to one."""
    import re

    s, topo = sched("genkautz(4, 256)", Collective.ALLREDUCE)
    art = compile_schedule(s, topo, runtime="rccl", simulate=False)
    assert art.lowering == "exact" and art.max_tb_steps <= 64 and art.threadblocks <= 64
    # count from the file itself (independent of the compiler's statistics): step indices and tb ids per gpu
    assert max(int(m) for m in re.findall(r'<step s="(\d+)"', art.xml)) < 64
    assert max(int(m) for m in re.findall(r'<tb id="(\d+)"', art.xml)) < 64
    with pytest.raises(CompileError) as e:
        compile_schedule(s, topo, runtime="rccl", channels=1, simulate=False)
    assert e.value.limit == "max_steps" and "MSCCL_MAX_NUM_STEPS" in str(e.value) and "allows 64" in str(e.value)
    assert "legacy" not in str(e.value) and "executor" not in str(e.value)     # recommends no other runtime


def test_refusals_recommend_no_other_runtime():
    """A refusal names its runtime's limit and never suggests another runtime (which has its own limits)."""
    s, topo = sched("torus(4, 4)", Collective.ALLREDUCE)
    for runtime in ("executor", "rccl", "legacy"):
        others = {"executor", "rccl", "legacy", "dialect"} - {runtime}
        with pytest.raises(CompileError) as e:
            compile_schedule(s, topo, runtime=runtime, max_steps=2, channels=1, combined=False, consolidate=False,
                             max_chunks=1)
        msg = str(e.value).lower()
        assert e.value.limit == "max_steps" and f"the {runtime} runtime" in msg
        assert not any(o in msg for o in others), msg


@pytest.mark.parametrize("runtime", ["executor", "rccl", "legacy"])
def test_default_size_window_is_selected(runtime):
    """No file is written with a size window its runtime never selects: maxBytes="0" only where the runtime reads
    0 as unbounded (executor/RCCL); microsoft/msccl (nbytes < maxBytes) gets its own 128 MiB default."""
    import re

    p = PROFILES[runtime]
    for c in COLLECTIVES:
        s, topo = sched("hypercube(3)", c)
        xml = compile_schedule(s, topo, runtime=runtime).xml
        lo, hi = (int(re.search(f' {a}="(\\d+)"', xml).group(1)) for a in ("minBytes", "maxBytes"))
        assert p.window_problem(lo, hi) is None and p.selects(1 << 20, lo, hi)
        assert (hi == 0) == p.max_bytes_zero_unbounded
        assert check_xml(xml, runtime=runtime, simulate=False).ok


def test_simulation_is_skipped_beyond_its_memory(monkeypatch):
    """The fit simulates a program only when the simulator's vector clocks fit SIMULATE_MAX_BYTES (the 1024-rank
    reduce-scatter of line(circulant(16, 1, 4), 3), 8192 thread blocks and 70731 published steps, needed 5 GB);
    otherwise it fits without simulating, as for SIMULATE_MAX_STEPS, and the file still passes the checker."""
    from services.compiler import api as compiler_api
    from services.compiler.check import msccl_simulate

    assert (msccl_simulate.simulation_bytes(8192, 70731) > msccl_simulate.SIMULATE_MAX_BYTES
            >= msccl_simulate.simulation_bytes(4096, 16384))
    assert not msccl_simulate.simulable(100, 8192, 70731) and msccl_simulate.simulable(130816, 4096, 16384)
    s, topo = sched("torus(4, 4)", Collective.ALLREDUCE)
    calls = []
    real = compiler_api.check_msccl
    monkeypatch.setattr(compiler_api, "check_msccl", lambda *a, **k: calls.append(1) or real(*a, **k))
    compile_schedule(s, topo)
    assert calls                                   # small: simulated during the fit
    calls.clear()
    monkeypatch.setattr(msccl_simulate, "SIMULATE_MAX_BYTES", 0)     # the simulator's memory bound lives there
    art = compile_schedule(s, topo)
    assert not calls
    monkeypatch.undo()
    rep = check_xml(art.xml)
    assert rep.ok and rep.comm_steps == s.steps, rep.error
