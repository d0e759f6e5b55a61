"""Schedule compilers: every compiled XML (MSCCL and oneCCL, all three collectives, a spread of topologies)
passes the validator and the CPU simulator with the exact collective result, realizes exactly the
schedule's number of communication steps, and runtime limits raise CompileError."""
from __future__ import annotations

from functools import lru_cache

import pytest

from services.compiler import (DIALECTS, CompileError, check_xml, compile_schedule, chunked_bfb, lower)
from services.compiler.msccl_check import parse_msccl
from services.synthesis.search.construct import construct_collectives
from services.synthesis.schedule.cost import measured_tau
from services.synthesis.schedule.ir import Collective
from services.synthesis.schedule.verify import verify

TOPOLOGIES = ["torus(4, 4)", "circulant(7, 2, 3)", "circulant(12)", "hypercube(3)", "bipartite(4)",
              "genkautz(3, 12)", "line(bipartite(2))", "dcirculant(6, 1, 2, 3, 4)", "ring(5, 2)"]
COLLECTIVES = list(Collective)


@lru_cache(maxsize=None)
def built(expr: str):
    return construct_collectives(expr)


def sched(expr: str, c: Collective):
    r = built(expr)[c]
    return r.schedule, r.topology


@pytest.mark.parametrize("fmt", ["msccl", "oneccl"])
@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_compiled_xml_is_accepted(expr, fmt):
    for c in COLLECTIVES:
        s, topo = sched(expr, c)
        art = compile_schedule(s, topo, fmt)
        rep = check_xml(art.xml, fmt)
        assert rep.ok, (expr, c, rep.error)
        assert rep.collective == c.value
        assert art.lowering == "exact" and art.loss == 0.0 and art.tau_ratio == 1.0
        assert art.chunks == s.grid and art.chunks_per_loop == s.nodes * s.grid
        # the predicted step count is the number of communication steps the XML realizes
        assert art.steps == s.steps == rep.comm_steps
        assert rep.simulated == ["out-of-place"]
        assert not [w for w in rep.warnings if w.kind != "structure"]


@pytest.mark.parametrize("expr", ["torus(4, 4)", "genkautz(3, 12)", "line(bipartite(2))", "ring(5, 2)"])
@pytest.mark.parametrize("fmt", ["msccl", "oneccl"])
def test_inplace_variants(expr, fmt):
    for c in COLLECTIVES:
        s, topo = sched(expr, c)
        art = compile_schedule(s, topo, fmt, inplace=True)
        rep = check_xml(art.xml, fmt)
        assert rep.ok and rep.simulated == ["in-place"] and rep.comm_steps == s.steps, (c, rep.error)
        if fmt == "msccl":
            assert 'inplace="1" outofplace="0"' in art.xml


@pytest.mark.parametrize("expr", ["torus(4, 4)", "circulant(12)", "bipartite(4)", "line(bipartite(2))"])
def test_consolidation_cuts_messages(expr):
    for c in COLLECTIVES:
        s, topo = sched(expr, c)
        plain = compile_schedule(s, topo, consolidate=False, dialect="rccl")
        cons = compile_schedule(s, topo, consolidate=True, dialect="rccl")
        rep = check_xml(cons.xml, dialect="rccl")
        assert rep.ok and rep.comm_steps == s.steps, rep.error
        assert cons.consolidated and cons.messages < plain.messages
        assert ' type="cpy"' in cons.xml
        # at most one message per link, step and shard (the cnt limit is not hit here)
        shards = len(set(zip(s.step_of.tolist(), s.sender.tolist(), s.receiver.tolist(), s.lane.tolist(),
                             s.source.tolist())))
        assert cons.messages <= shards


def test_rendezvous_connections_suffice():
    """Every dependency points backwards in the generation order and each receive directly follows its send,
    so compiled programs run even when a send only completes at the matching receive."""
    for expr in ["torus(4, 4)", "bipartite(4)", "dcirculant(6, 1, 2, 3, 4)"]:
        for c in COLLECTIVES:
            s, topo = sched(expr, c)
            for cons in (False, True):
                rep = check_xml(compile_schedule(s, topo, consolidate=cons).xml, fifo=0)
                assert rep.ok, (expr, c, cons, rep.error)


def test_channels_split_transfers():
    s, topo = sched("torus(4, 4)", Collective.ALLREDUCE)
    art = compile_schedule(s, topo, channels=2)
    assert art.channels == 2 and art.chunks == 2 * s.grid and 'nchannels="2"' in art.xml
    rep = check_xml(art.xml)
    assert rep.ok and rep.comm_steps == s.steps
    # parallel arcs get their own channels
    s, topo = sched("ring(5, 2)", Collective.ALLGATHER)
    art = compile_schedule(s, topo, channels=3)
    assert 'nchannels="6"' in art.xml and check_xml(art.xml).ok


def test_msccl_xml_shape():
    s, topo = sched("bipartite(4)", Collective.REDUCESCATTER)
    art = compile_schedule(s, topo)
    assert not art.xml.startswith("<?xml")
    first = art.xml.splitlines()[0]
    for attr in ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                 "minBytes", "maxBytes", "redop"):
        assert f' {attr}="' in first
    assert 'coll="reducescatter"' in first
    algo, limits, errors, _ = parse_msccl(art.xml)
    assert not errors and limits.dialect == "executor"
    n, P = s.nodes, s.grid
    assert algo.nchunksperloop == n * P
    for g in algo.gpus:
        assert (g.i_chunks, g.o_chunks) == (n * P, P)
        peers = {(tb.send, tb.recv, tb.chan) for tb in g.tbs}
        assert len(peers) == len(g.tbs)                       # one tb per (peer, direction, channel)
        for tb in g.tbs:
            assert tb.send < 0 or tb.recv < 0
            for st in tb.steps:
                if st.type == "nop":
                    assert st.depid >= 0                      # nops only carry extra dependencies
    legacy = compile_schedule(s, topo, dialect="legacy")
    assert 'coll="reduce_scatter"' in legacy.xml
    assert check_xml(legacy.xml).ok and check_xml(legacy.xml).dialect == "legacy"
    ag, _ = sched("bipartite(4)", Collective.ALLGATHER)
    ag_algo = parse_msccl(compile_schedule(ag, topo).xml)[0]
    assert (ag_algo.gpus[0].i_chunks, ag_algo.gpus[0].o_chunks) == (P, n * P)


def test_artifact_api():
    s, topo = sched("hypercube(3)", Collective.ALLREDUCE)
    art = compile_schedule(s, topo, "msccl", check=True)
    d = art.as_dict()
    for key in ("fmt", "collective", "topology", "nodes", "steps", "chunks", "chunks_per_loop", "loss",
                "tau_ratio", "lowering", "dialect", "threadblocks", "max_tb_steps", "messages", "xml_bytes"):
        assert key in d
    assert "xml" not in d and "xml" in art.as_dict(with_xml=True)
    assert d["threadblocks"] == 2 * topo.degree and d["max_tb_steps"] <= DIALECTS["executor"].max_steps
    one = compile_schedule(s, topo, "oneccl")
    assert one.fmt == "oneccl" and one.dialect is None and one.xml.count('<sync step="') == s.steps * s.nodes
    with pytest.raises(CompileError):
        compile_schedule(s, topo, "nccl")
    with pytest.raises(CompileError):
        compile_schedule(s, topo, dialect="nope")
    rep = check_xml(art.xml)
    assert rep.as_dict()["ok"] and rep.as_dict()["error"] is None


# ----- lowering --------------------------------------------------------------------------------------
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


@pytest.mark.parametrize("c", COLLECTIVES)
def test_chunked_fallback_compiles(c):
    s, topo = sched("torus(4, 4)", c)
    for fmt in ("msccl", "oneccl"):
        art = compile_schedule(s, topo, fmt, max_chunks=2)
        assert art.lowering == "chunked-bfb" and art.chunks == 2 and art.loss > 0 and art.warnings
        rep = check_xml(art.xml, fmt)
        assert rep.ok and rep.comm_steps == art.steps == s.steps
    assert verify(chunked_bfb(topo, c, 3), topo).ok


def test_line_graph_fallback_reports_steps():
    s, topo = sched("line(dcirculant(4, 1, 2))", Collective.ALLGATHER)       # its schedule splits shards in two
    art = compile_schedule(s, topo, max_chunks=1)
    assert art.lowering == "chunked-bfb" and art.original_steps == s.steps
    assert check_xml(art.xml).comm_steps == art.steps


# ----- runtime limits ----------------------------------------------------------------------------------
def test_step_limit_raises_compile_error():
    s, topo = sched("torus(4, 4)", Collective.ALLREDUCE)
    with pytest.raises(CompileError) as e:
        compile_schedule(s, topo, max_steps=4, consolidate=False)
    err = e.value
    assert err.limit == "max_steps" and err.maximum == 4 and err.value > 4
    assert err.gpu is not None and err.tb is not None
    assert "MSCCL_MAX_NUM_STEPS" in str(err) and f"needs {err.value} steps" in str(err)


def test_auto_consolidation_when_steps_exceed():
    s, topo = sched("torus(4, 4)", Collective.ALLGATHER)
    plain = compile_schedule(s, topo, consolidate=False)
    assert not plain.consolidated
    limit = plain.max_tb_steps - 1
    with pytest.raises(CompileError) as e:
        compile_schedule(s, topo, consolidate=False, max_steps=limit)
    assert e.value.limit == "max_steps"
    art = compile_schedule(s, topo, consolidate="auto", max_steps=limit)
    assert art.consolidated and art.max_tb_steps <= limit and art.messages < plain.messages
    rep = check_xml(art.xml, max_steps=limit)
    assert rep.ok and rep.comm_steps == s.steps


def test_baseline_schedules_compile():
    """Schedules not built by BFB: a pipelined double binary tree (reduce + broadcast, parallel arcs) and the
    classic torus. MSCCL has no global step barrier, so its realized depth can only be shorter than the
    synchronous step count (pipelined chunks overlap); oneCCL syncs every step."""
    from services.synthesis.evaluate import baselines

    dbt = baselines.double_binary_tree(8)
    s = dbt.schedule(2, Collective.ALLREDUCE)
    for fmt in ("msccl", "oneccl"):
        rep = check_xml(compile_schedule(s, dbt.topology, fmt).xml, fmt)
        assert rep.ok, rep.error
        assert rep.comm_steps <= s.steps if fmt == "msccl" else rep.comm_steps == s.steps
    tc = baselines.torus_classic(4, 4)
    for c in COLLECTIVES:
        s = tc.schedule(c)
        for fmt in ("msccl", "oneccl"):
            rep = check_xml(compile_schedule(s, tc.topology, fmt).xml, fmt)
            assert rep.ok and rep.comm_steps == s.steps, (c, fmt, rep.error)


def test_channel_limits():
    s, topo = sched("torus(4, 4)", Collective.ALLGATHER)
    with pytest.raises(CompileError) as e:
        compile_schedule(s, topo, channels=33)
    assert e.value.limit == "max_channels" and e.value.maximum == 32
    s2, topo2 = sched("ring(5, 2)", Collective.ALLGATHER)    # two lanes per link -> 2 x 17 channels
    with pytest.raises(CompileError) as e:
        compile_schedule(s2, topo2, channels=17, max_chunks=64)
    assert e.value.limit == "max_channels" and e.value.value == 34


def test_blocks_per_channel_limit():
    r = construct_collectives("complete(34)")[Collective.ALLGATHER]
    with pytest.raises(CompileError) as e:
        compile_schedule(r.schedule, r.topology)
    assert e.value.limit == "max_tbs_per_channel" and e.value.value == 33 and e.value.maximum == 32


def test_offset_limit():
    s, topo = sched("torus(4, 4)", Collective.ALLGATHER)
    with pytest.raises(CompileError) as e:
        lower(s, topo, channels=4, max_chunks=16, max_buffer_chunks=32)
    assert e.value.limit == "max_offset"


def test_send_and_overwrite_in_one_step_uses_a_snapshot():
    """A (valid, if wasteful) allgather where node 0 forwards shard 1 in the same step as it receives shard 1
    again: the send must carry the start-of-step value, so the compilers copy it to scratch first."""
    from fractions import Fraction as F

    from services.synthesis.topology.catalog import build
    from services.synthesis.schedule.ir import Schedule

    topo = build("complete(3)")
    whole = (F(0), F(1))
    tuples = [((v, whole), (v, w), 1) for v in range(3) for w in range(3) if w != v]
    tuples += [((1, whole), (1, 0), 2), ((1, whole), (0, 2), 2)]
    s = Schedule.from_tuples(Collective.ALLGATHER, 3, tuples, topology=topo.expr)
    assert verify(s, topo).ok
    for fmt in ("msccl", "oneccl"):
        art = compile_schedule(s, topo, fmt)
        rep = check_xml(art.xml, fmt)
        assert rep.ok and rep.comm_steps == 2, rep.error
    assert 'type="cpy" srcbuf="o"' in compile_schedule(s, topo).xml
