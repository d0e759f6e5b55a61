"""All-to-all schedules to XML (issue 13 item 4, compile part) and the compiler's bounded-memory machinery
(issue 11 item 5): every all-to-all file on a spread of topologies (tori, circulants, a hypercube, a
generalized Kautz graph, a degraded torus, a ring with parallel arcs) passes the checker and the simulator of
every runtime profile (each rank ends with exactly its block of every other rank's buffer) with the
schedule's steps and predicted time; the pieces that keep a 1024-rank compile small give the same files as
the direct computations they replace."""
from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest

from services.cli import main
from services.compiler import PROFILES, CompileError, check_xml, compile_schedule
from services.compiler.msccl import dependencies
from services.compiler.check import tokenizer
from services.compiler.common.arrays import lexorder
from services.compiler.msccl.ir import MscclOptions
from services.compiler.msccl.messages import build_messages
from services.compiler.msccl.program import build_program
from services.compiler.text import msccl as msccl_text
from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.dependency import dependency_time
from services.synthesis.schedule.ir import Collective
from services.synthesis.search.construct import construct_collectives
from services.synthesis.topology.catalog import build

TOPOLOGIES = ["torus(3, 4)", "torus(4, 4)", "circulant(10, 1, 3)", "hypercube(3)", "genkautz(3, 12)",
              "remove(torus(3, 3), 0>1, 4>5)", "ring(5, 2)"]
RUNTIMES = ["executor", "rccl", "legacy", "oneccl"]
LINK = LinkModel.from_units(10, 100)
SIZES = (1 << 20, 1 << 28)


@lru_cache(maxsize=None)
def a2a(expr: str):
    return alltoall_schedule(build(expr))


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_alltoall_xml_runs_on_every_runtime(expr):
    """Checker and simulator of every profile: out of place, the schedule's comm steps, and the compiled
    program's predicted time equal to the schedule's (the lowering is exact)."""
    result = a2a(expr)
    s = result.schedule
    for runtime in RUNTIMES:
        fmt = "oneccl" if runtime == "oneccl" else "msccl"
        art = compile_schedule(s, result.topology, runtime=runtime, link=LINK, sizes=SIZES)
        rep = check_xml(art.xml, fmt, runtime=None if fmt == "oneccl" else runtime)
        assert rep.ok, (expr, runtime, rep.error)
        assert rep.collective == "alltoall" and rep.simulated == ["out-of-place"]
        assert art.collective == "alltoall" and art.lowering == "exact" and art.loss == 0.0
        assert art.steps == s.steps == rep.comm_steps
        assert art.chunks == s.grid // s.nodes and art.chunks_per_loop == s.grid
        for m in SIZES:
            assert art.predicted_time_us[str(m)] == pytest.approx(art.schedule_time_us[str(m)])
            assert art.predicted_time_us[str(m)] == pytest.approx(
                dependency_time(s, LINK, m, degree=result.topology.degree) * 1e6, rel=1e-9)
            assert art.predicted_barrier_time_us[str(m)] == pytest.approx(result.time_s(LINK, m) * 1e6)
        if fmt == "msccl":
            mode = 'inplace="0" outofplace="1"' if PROFILES[runtime].reads_outofplace else 'inplace="0"'
            assert 'coll="alltoall"' in art.xml and mode in art.xml
            assert art.max_tb_steps <= PROFILES[runtime].max_steps and art.threadblocks <= PROFILES[runtime].max_tbs
        else:
            assert 'coll="alltoall"' in art.xml and 'inplace="0"' in art.xml


@pytest.mark.parametrize("options", [dict(instances=2), dict(channels=2), dict(consolidate=True, combined=False),
                                     dict(combined=False, proto="LL")])
def test_alltoall_program_options(options):
    """Instances (a block stays contiguous: instance j of a chunk inside its block), channels, consolidation
    through scratch and LL all give files the simulator accepts."""
    for expr in ("torus(3, 4)", "remove(torus(3, 3), 0>1, 4>5)"):
        result = a2a(expr)
        art = compile_schedule(result.schedule, result.topology, runtime="executor", **options)
        rep = check_xml(art.xml, runtime="executor")
        assert rep.ok and rep.comm_steps == result.schedule.steps, (expr, options, rep.error)


def test_alltoall_simulator_catches_a_wrong_destination():
    result = a2a("torus(4, 4)")
    xml = compile_schedule(result.schedule, result.topology, combined=False).xml
    i = xml.index('type="r" ')
    j = xml.index('dstoff="', i) + len('dstoff="')
    k = xml.index('"', j)
    bad = xml[:j] + str(int(xml[j:k]) + 1) + xml[k:]
    rep = check_xml(bad, runtime="executor")
    assert not rep.ok and rep.error.kind in ("result", "race", "bounds")


def test_alltoall_in_place_is_refused():
    result = a2a("hypercube(3)")
    for runtime, mode in (("executor", "both"), ("executor", "in"), ("legacy", "in"), ("oneccl", "in")):
        with pytest.raises(CompileError) as e:
            compile_schedule(result.schedule, result.topology, runtime=runtime, inplace=mode)
        assert e.value.limit == "inplace" and "out-of-place" in str(e.value)


def test_cli_compiles_alltoall(capsys, tmp_path):
    out = tmp_path / "a2a.xml"
    code = main(["compile", "torus(3, 4)", "--collective", "alltoall", "--check", "--json", "-o", str(out),
                 "--alpha-us", "10", "--bandwidth-gbps", "100", "--size", "1048576"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["collective"] == "alltoall" and data["check"]["ok"]
    assert data["check"]["simulated"] == ["out-of-place"] and data["schedule_tau"] == data["tau"]
    assert data["predicted_time_us"] == data["schedule_time_us"]
    assert main(["compile", str(out), "--check", "--runtime", "executor"]) == 0
    capsys.readouterr()
    assert main(["compile", "torus(3, 4)", "--collective", "alltoall", "--inplace", "both"]) == 2
    assert "out-of-place" in capsys.readouterr().err


# ----- the machinery that keeps large compiles small ---------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_lexorder_is_lexsort(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 3000))
    keys = [rng.integers(-3, 9, n), rng.integers(0, 2, n).astype(bool), rng.integers(-1, 5000, n).astype(np.int32)]
    assert np.array_equal(lexorder(keys), np.lexsort(keys))
    wide = [rng.integers(0, 1 << 40, n), rng.integers(0, 1 << 30, n)]            # more than 63 bits: fallback
    assert np.array_equal(lexorder(wide), np.lexsort(wide))
    packed = [rng.integers(0, 1 << 30, n), rng.integers(0, 1 << 25, n)]          # keys fit, index does not
    assert np.array_equal(lexorder(packed), np.lexsort(packed))


def test_dependencies_in_gpu_batches_give_the_same_file(monkeypatch):
    for expr, c in (("torus(4, 4)", Collective.ALLREDUCE), ("genkautz(3, 12)", Collective.REDUCESCATTER)):
        built = construct_collectives(expr)[c]
        whole = compile_schedule(built.schedule, built.topology, consolidate=True).xml_data
        monkeypatch.setattr(dependencies, "DEP_BATCH_UNITS", 7)
        batched = compile_schedule(built.schedule, built.topology, consolidate=True).xml_data
        monkeypatch.undo()
        assert whole == batched and isinstance(whole, bytes)


def test_threads_give_the_same_file(monkeypatch):
    """XML blocks and dependency batches on two threads (services.compiler.common.pool) give the one-thread file; small
    blocks and batches so that several are in flight, and the blocks come back in order."""
    from services.compiler.common import pool

    assert list(pool.ordered_map(lambda x: x * x, range(9), threads=2)) == [x * x for x in range(9)]
    built = construct_collectives("ring(6)")[Collective.ALLREDUCE]
    monkeypatch.setattr(dependencies, "DEP_BATCH_UNITS", 40)
    monkeypatch.setattr(msccl_text, "XML_BLOCK_OPS", 8)
    files = []
    for threads in (1, 2):
        monkeypatch.setattr(pool, "COMPILE_THREADS", threads)
        files.append(compile_schedule(built.schedule, built.topology, runtime="executor").xml_data)
    assert files[0] == files[1] and files[0].count(b"<gpu ") == 6


@pytest.mark.parametrize("expr", ["torus(4, 4)", "genkautz(3, 12)", "ring(5, 2)"])
def test_thread_block_bounds_are_exact(expr):
    """Messages.lower_bounds gives every gpu's thread blocks exactly (so a runtime's tb limit refuses a
    candidate before its program is built) and bounds its steps from below."""
    for c in (Collective.ALLGATHER, Collective.ALLREDUCE):
        s = construct_collectives(expr)[c].schedule
        for combined, channels in ((True, 1), (False, 1), (True, 2), (False, 2)):
            opt = MscclOptions(channels=channels, mode="out", combined=combined, fuse=combined)
            msgs = build_messages(s, PROFILES["executor"], opt)
            lb = msgs.lower_bounds(opt)
            prog = build_program(s, PROFILES["executor"], opt, messages=msgs)
            assert np.array_equal(lb["tbs_per_gpu"], prog.stats["tbs_per_gpu"]), (expr, c, combined, channels)
            steps_per_gpu = np.bincount(prog.stats["tb_gpu"], weights=prog.stats["steps_per_tb"],
                                        minlength=s.nodes)
            assert (lb["steps_per_gpu"] <= steps_per_gpu).all()
            assert lb["steps_per_tb"] <= prog.stats["steps_per_tb"].max()
            assert lb["steps_per_tb_avg"] <= prog.stats["steps_per_tb"].max()


def test_tokenizer_check_in_windows(monkeypatch):
    """The tokenizer's verdict on a file many windows long, and the line of a fault far into it."""
    built = construct_collectives("torus(4, 4)")[Collective.ALLREDUCE]
    data = compile_schedule(built.schedule, built.topology).xml_data
    monkeypatch.setattr(tokenizer, "WINDOW", 512)
    assert tokenizer.lexical_findings(data) == [] and tokenizer.lexical_findings(data.decode()) == []
    i = data.index(b"\n      <step", len(data) // 2)
    bad = data[:i + 1] + b"\t" + data[i + 1:]
    line = data.count(b"\n", 0, i) + 2
    for text in (bad, bad.decode()):
        found = tokenizer.lexical_findings(text)
        assert len(found) == 1 and found[0].message.startswith(f"line {line}, column 1: expecting '<'")


def test_alltoall_pairs_are_built_once_per_fit_and_shared(monkeypatch):
    """The held (rank, unit) pairs depend on the schedule and instances only: the fit search builds them once and
    every candidate's message table uses them (here two tables: steps per thread block capped at 8 send the
    search to more channels), with the same file as when each table builds its own."""
    from dataclasses import replace

    from services.compiler.fit import search as fit_module
    from services.compiler.lowering.layout import AlltoallPairs
    from services.compiler.runtimes import profile_for

    s, topo = a2a("torus(4, 4)").schedule, build("torus(4, 4)")
    profile = replace(profile_for("executor"), max_steps=8)
    built, tables = [], []

    class Counted(AlltoallPairs):
        def __init__(self, *a, **k):
            built.append(1)
            super().__init__(*a, **k)

    def counted_messages(*a, **k):
        tables.append(k.get("pairs") or (a[4] if len(a) > 4 else None))
        return build_messages(*a, **k)

    monkeypatch.setattr(fit_module, "AlltoallPairs", Counted)
    monkeypatch.setattr(fit_module, "build_messages", counted_messages)
    art = compile_schedule(s, topo, runtime=profile, link=LINK, sizes=SIZES, simulate=False)
    assert len(built) == 1 and len(tables) == 2 and tables[0] is tables[1]
    monkeypatch.setattr(fit_module, "AlltoallPairs", lambda *a, **k: None)   # each table builds its own
    assert compile_schedule(s, topo, runtime=profile, link=LINK, sizes=SIZES, simulate=False).xml == art.xml


def test_alltoall_pairs_give_every_held_pair_its_own_slot():
    """Every unit at its source and every (receiver, unit) pair a transfer delivers has a slot, one per distinct
    pair; a pair no transfer delivers is refused, as the sorted keys refused it."""
    from services.compiler.common.arrays import ranges
    from services.compiler.lowering.layout import AlltoallPairs, alltoall_position

    s = a2a("torus(3, 4)").schedule
    pairs = AlltoallPairs(s)
    n, P = s.nodes, s.grid
    W = np.repeat(np.arange(n, dtype=np.int64), P)
    G = W * P + np.tile(np.arange(P, dtype=np.int64), n)
    ln = (s.hi - s.lo).astype(np.int64)
    rep = np.repeat(np.arange(ln.size), ln)
    W = np.r_[W, s.receiver[rep].astype(np.int64)]
    G = np.r_[G, s.source[rep].astype(np.int64) * P + alltoall_position(ranges(s.lo, ln), 0, n, s.grid, 1)]
    keys, slots = W * (n * P) + G, pairs.slots(W, G)
    assert np.unique(keys).size == np.unique(slots).size == np.unique(keys * pairs.size + slots).size
    held = set(keys.tolist())
    w, g = next((w, g) for w in range(n) for g in range(n * P) if w * n * P + g not in held)
    with pytest.raises(KeyError):
        pairs.slots(np.array([w]), np.array([g]))
