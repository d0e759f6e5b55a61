"""The cycle test of a program's waits (services.compiler.check.deadlock) decides exactly what the CPU simulator finds:
on a spread of compiled programs (combined and separate thread blocks, consolidated or not, one and two
channels) and connection buffering 0 (rendezvous), 1 and 2 messages, both say deadlock on the same programs, and
both outcomes occur; the same on random circulants (hypothesis). A connection with unmatched sends or receives, and a wait for a step that is never
published, are reported; the fit search holds programs too large to simulate to the proof, and so does the checker
of any file (the same verdicts from the parsed XML, nops included)."""
from __future__ import annotations

import itertools
import re
from dataclasses import replace
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from services.compiler import compile_schedule
from services.compiler.check.deadlock import deadlock
from services.compiler.errors import CompileError, Finding
from services.compiler.msccl.ir import RECEIVES, MscclOptions
from services.compiler.msccl.program import build_program
from services.compiler.text.msccl import to_xml
from services.compiler.check.msccl import check_msccl
from services.compiler.runtimes import profile_for
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective
from services.synthesis.search.construct import construct_collectives

PROFILE = profile_for("executor")
SPREAD = ["torus(4, 4)", "circulant(7, 2, 3)", "hypercube(3)", "genkautz(3, 12)", "ring(5, 2)"]


@lru_cache(maxsize=None)
def built(expr: str):
    return construct_collectives(expr)


def program(expr: str, coll: Collective, opt: MscclOptions):
    return build_program(built(expr)[coll].schedule, PROFILE, opt)


def xml_of(prog, coll: Collective, mode: str) -> str:
    return to_xml(prog, name="t", coll=PROFILE.coll_name(coll.value), proto="Simple", profile=PROFILE,
                  inplace=mode == "both", outofplace=True, min_bytes=0, max_bytes=0).decode()


@pytest.mark.parametrize("expr", SPREAD)
def test_the_proof_and_the_simulator_agree(expr):
    seen = set()
    for coll in built(expr):
        for combined, cons, ch in itertools.product((True, False), (False, True), (1, 2)):
            opt = MscclOptions(channels=ch, mode="out", consolidate=cons, combined=combined, fuse=combined)
            try:
                prog = program(expr, coll, opt)
            except CompileError:
                continue
            text = xml_of(prog, coll, "out")
            for fifo in (0, 1, 2):
                rep = check_msccl(text, runtime=PROFILE, fifo=fifo)
                simulated = None if rep.ok else rep.error.kind
                assert simulated in (None, "deadlock"), rep.error       # the programs are otherwise correct
                proved = deadlock(prog, fifo)
                assert (proved is None) == (simulated is None), (coll, opt.label(), fifo, rep.error, proved)
                from_file = check_msccl(text, runtime=PROFILE, fifo=fifo, simulate_max_steps=0)   # the file, proved
                assert from_file.ok == (simulated is None) and not from_file.simulated, from_file.error
                assert any("not simulated" in w.message for w in from_file.warnings)
                if proved is not None:
                    assert from_file.error.kind == "deadlock"
                    assert proved.kind == "deadlock" and proved.gpu is not None and proved.step is not None
                seen.add(simulated)
    assert seen == {None, "deadlock"}          # both outcomes are exercised on every topology of the spread


def test_separate_thread_blocks_are_proved_at_rendezvous():
    """What test_compiler shows by simulation holds for the proof too (every fifo, no buffering at all)."""
    for coll in built("torus(4, 4)"):
        prog = program("torus(4, 4)", coll, MscclOptions(mode="both", combined=False, fuse=False))
        assert all(deadlock(prog, f) is None for f in (0, 1, 2, 8))


def _drop_receive(prog):
    """The program with its first receive left out (its connection then has one send too many)."""
    r = int(np.flatnonzero(RECEIVES[prog.ops["kind"]])[0])
    keep = np.arange(prog.tb_of_op.size) != r
    ops = {c: a[keep] for c, a in prog.ops.items()}
    ptr = prog.nop_deps[0]
    counts = np.diff(ptr)[keep]
    gone = slice(int(ptr[r]), int(ptr[r + 1]))
    nop_tb, nop_pos = (np.delete(a, np.arange(gone.start, gone.stop)) for a in prog.nop_deps[1:])
    out = _with(prog, ops=ops, xml_pos=prog.xml_pos[keep], dep_first=prog.dep_first[keep],
                hasdep=prog.hasdep[keep], nop_deps=(np.r_[0, np.cumsum(counts)], nop_tb, nop_pos))
    out.tb_of_op = prog.tb_of_op[keep]
    return out


def test_unmatched_messages_are_a_mismatch():
    prog = program("hypercube(3)", Collective.ALLGATHER, MscclOptions(combined=False, fuse=False))
    found = deadlock(_drop_receive(prog), 2)
    assert isinstance(found, Finding) and found.kind == "mismatch"
    sends, receives = (int(x) for x in re.findall(r"(\d+) sends and (\d+) receives", found.message)[0])
    assert sends == receives + 1


def test_a_wait_for_an_unpublished_step_never_ends():
    prog = program("torus(4, 4)", Collective.ALLREDUCE, MscclOptions(combined=False, fuse=False))
    r = int(np.flatnonzero(prog.dep_first[:, 0] >= 0)[0])
    dep = prog.dep_first.copy()
    dep[r, 1] = 10_000                          # past the producer's last step
    found = deadlock(_with(prog, dep_first=dep), 2)
    assert found is not None and found.kind == "deadlock" and "never publishes" in found.message


def _with(prog, **changes):
    out = replace(prog, **changes)
    out.tb_of_op = prog.tb_of_op
    return out


def test_negative_buffering_is_refused():
    prog = program("ring(5, 2)", Collective.ALLGATHER, MscclOptions())
    with pytest.raises(ValueError):
        deadlock(prog, -1)


def test_the_fit_search_holds_unsimulated_programs_to_the_proof(monkeypatch):
    """With simulation off every candidate goes to the proof; one it refuses is abandoned (limit
    "simulation") and the next candidate is tried."""
    import services.compiler.fit.search as fit

    r = built("torus(4, 4)")[Collective.ALLREDUCE]
    calls = []

    def refuse_first(prog, fifo):
        calls.append(fifo)
        return Finding("deadlock", "deadlock: made up by the test") if len(calls) == 1 else None

    monkeypatch.setattr(fit, "deadlock", refuse_first)
    art = compile_schedule(r.schedule, r.topology, simulate=False, combined=False)
    assert calls == [PROFILE.fifo_messages("Simple")] * 2
    assert art.attempts[0]["limit"] == "simulation" and "made up by the test" in art.attempts[0]["reason"]
    assert art.attempts[1]["ok"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(5, 11), jumps=st.sets(st.integers(1, 4), min_size=1, max_size=2),
       directed=st.booleans(), coll=st.sampled_from(sorted(ALLGATHER_FAMILY, key=lambda c: c.value)),
       combined=st.booleans(), cons=st.booleans(), ch=st.sampled_from([1, 2, 3]),
       mode=st.sampled_from(["out", "both"]), fifo=st.integers(0, 3))
def test_the_proof_agrees_with_the_simulator_on_random_circulants(n, jumps, directed, coll, combined, cons, ch, mode,
                                                                   fifo):
    """Circulants the compiler's tests do not use (random size and offsets, directed or not), any options."""
    offsets = sorted(j % n for j in jumps if j % n)
    assume(offsets and (directed or all(2 * j != n for j in offsets)))
    expr = f"{'dcirculant' if directed else 'circulant'}({n}, {', '.join(map(str, offsets))})"
    try:
        r = built(expr)[coll]
    except ValueError:                 # not strongly connected: no schedule
        assume(False)
    try:
        prog = build_program(r.schedule, PROFILE, MscclOptions(channels=ch, mode=mode, consolidate=cons,
                                                                combined=combined, fuse=combined))
    except CompileError:
        assume(False)
    rep = check_msccl(xml_of(prog, coll, mode), runtime=PROFILE, fifo=fifo)
    assert rep.ok or rep.error.kind == "deadlock", rep.error
    proved = deadlock(prog, fifo)
    assert (proved is None) == rep.ok, (expr, coll, combined, cons, ch, mode, fifo, rep.error, proved)


def test_a_file_too_large_for_the_simulators_memory_is_proved_not_simulated():
    """The simulator's vector clocks are quadratic in thread blocks: a 256-rank file with 64 tbs per rank would
    need gigabytes (it ran out of memory under a 6 GB cap); the checker proves it in seconds instead."""
    from services.compiler import check_xml
    from services.compiler.check.msccl_simulate import SIMULATE_MAX_BYTES, simulation_bytes

    r = built("torus(4, 4)")[Collective.ALLREDUCE]
    art = compile_schedule(r.schedule, r.topology, channels=4)
    rep = check_xml(art.xml)
    assert rep.ok and rep.simulated                                   # small: simulated as before
    assert simulation_bytes(256 * 64, 100_000) > SIMULATE_MAX_BYTES   # the 256-rank case is over the bound
    rep = check_xml(art.xml, simulate_max_steps=art.xml_steps - 1)
    assert rep.ok and rep.simulated == [] and rep.comm_steps is None
    assert "deadlock freedom proved" in rep.warnings[-1].message


def _chain(n_tbs: int, closed: bool):
    """One gpu of n_tbs thread blocks of one published nop each, tb i waiting for tb i + 1 (and the last for the
    first when closed): the proof's sweeps in tb order complete one step each, so it runs the rest from its
    stack of parked thread blocks."""
    from services.compiler.check.deadlock import _KIND, _deadlock_of_columns

    ids = np.arange(n_tbs)
    tb_cols = np.c_[np.zeros(n_tbs, np.int64), ids, -np.ones((n_tbs, 2), np.int64), np.zeros(n_tbs, np.int64)]
    depid = np.where(ids + 1 < n_tbs, ids + 1, 0 if closed else -1)
    one = np.ones(n_tbs, np.int64)
    return _deadlock_of_columns(1, tb_cols, one, _KIND["nop"] * one, 0 * one, one, depid, np.where(depid >= 0, 0, -1),
                                1)


def test_waits_against_the_tb_order_are_run_from_the_stack():
    assert _chain(64, closed=False) is None
    found = _chain(64, closed=True)
    assert found.kind == "deadlock" and "64 steps wait for each other in a cycle" in found.message
