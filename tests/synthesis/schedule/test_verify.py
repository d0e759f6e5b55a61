"""The model checker (App. B, Definition 4) must accept valid schedules and reject every kind of mutation,
naming the first violation precisely."""
from fractions import Fraction as F

import numpy as np
import pytest

from services.synthesis.bfb.lp import bfb_schedule
from services.synthesis.topology.catalog import build
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective, Op, Schedule
from services.synthesis.schedule.verify import ScheduleInvalid, verify

from tests.helpers import rebuild

TOPOLOGIES = ["genkautz(4, 64)", "torus(4, 6)", "bipartite(2)", "line(bipartite(3))", "ring(5, 2)"]


def _sched(expr, collective=Collective.ALLGATHER):
    topo = build(expr)
    return topo, bfb_schedule(topo, collective)


def _non_arc_receiver(topo, sender):
    out = set(topo.heads[topo.tails == sender].tolist())
    return next(x for x in range(topo.nodes) if x not in out)


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_valid_schedules_pass(expr):
    topo = build(expr)
    for c in ALLGATHER_FAMILY:
        report = verify(bfb_schedule(topo, c), topo)
        assert report.ok and report.violation is None


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_missing_chunk_is_reported(expr):
    topo, s = _sched(expr)
    last = s.step_slice(s.steps)
    i = last.start                                   # a final-step delivery: nobody forwards it later
    report = verify(rebuild(s, keep=np.arange(s.transfers) != i), topo)
    assert not report.ok
    v = report.violation
    assert v.kind == "incomplete"
    assert v.receiver == s.receiver[i] and v.source == s.source[i]
    lo, hi = F(int(s.lo[i]), s.grid), F(int(s.hi[i]), s.grid)
    assert lo <= F(v.chunk[0]) < F(v.chunk[1]) <= hi
    assert "never receives" in v.message


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_dropping_a_relayed_chunk_breaks_the_relay(expr):
    topo, s = _sched(expr)
    if s.steps < 2:
        pytest.skip("needs two steps")
    # a step-1 transfer whose receiver forwards the same shard in step 2
    s1 = s.step_slice(1)
    s2 = s.step_slice(2)
    fwd = {(int(v), int(u)) for v, u in zip(s.source[s2], s.sender[s2])}
    i = next(i for i in range(s1.start, s1.stop) if (int(s.source[i]), int(s.receiver[i])) in fwd)
    report = verify(rebuild(s, keep=np.arange(s.transfers) != i), topo)
    assert report.violation.kind == "not_held" and report.violation.step == 2
    assert report.violation.sender == s.receiver[i] and report.violation.source == s.source[i]


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_send_before_the_data_arrived(expr):
    topo, s = _sched(expr)
    if s.steps < 2:
        pytest.skip("needs two steps")
    i = s.step_slice(2).start
    step = s.step_of.copy()
    step[i] = 1
    report = verify(rebuild(s, step=step), topo)
    v = report.violation
    assert v.kind == "not_held" and v.step == 1 and v.sender == s.sender[i] and v.source == s.source[i]
    assert "does not hold" in v.message and "step 1" in v.message


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_transfer_over_a_non_existent_arc(expr):
    topo, s = _sched(expr)
    i = s.transfers // 2
    receiver = s.receiver.copy()
    receiver[i] = _non_arc_receiver(topo, int(s.sender[i]))
    report = verify(rebuild(s, receiver=receiver), topo)
    v = report.violation
    assert v.kind == "missing_arc" and v.transfer is not None and v.receiver == receiver[i]
    assert "no arc" in v.message


def test_parallel_lane_that_does_not_exist():
    topo, s = _sched("ring(5, 2)")
    lane = s.lane.copy()
    lane[0] = 2
    assert verify(rebuild(s, lane=lane), topo).violation.kind == "missing_arc"


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_wrong_reduction_duplicate_contribution(expr):
    topo, s = _sched(expr, Collective.REDUCESCATTER)
    i = s.step_slice(s.steps).start          # reduce one partial twice into its owner
    report = verify(rebuild(s, extra=[i]), topo)
    v = report.violation
    assert v.kind == "wrong_reduction" and "more than once" in v.message
    assert v.source == s.source[i] and v.receiver == s.source[i]


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_wrong_reduction_missing_contribution(expr):
    topo, s = _sched(expr, Collective.REDUCESCATTER)
    i = s.step_slice(1).start
    report = verify(rebuild(s, keep=np.arange(s.transfers) != i), topo)
    v = report.violation
    assert v.kind == "wrong_reduction" and "missing the contributions of nodes" in v.message
    assert str(int(s.sender[i])) in v.message


@pytest.mark.parametrize("expr", TOPOLOGIES)
def test_allreduce_copying_a_partial_result_is_wrong(expr):
    topo, s = _sched(expr, Collective.ALLREDUCE)
    # move the first allgather transfer one step earlier, into the last reduce-scatter step's time
    rs_steps = int((s.ops == Op.REDUCE).sum())
    i = s.step_slice(rs_steps + 1).start
    source = s.source.copy()
    source[i] = (source[i] + 1) % topo.nodes       # copy the wrong shard
    report = verify(rebuild(s, source=source), topo)
    assert report.violation.kind == "wrong_reduction"


def test_structure_errors():
    topo, s = _sched("torus(4, 6)")
    hi = s.hi.copy()
    hi[3] = s.grid + 1
    assert verify(rebuild(s, hi=hi), topo).violation.kind == "structure"
    lo = s.lo.copy()
    lo[3] = s.hi[3]
    assert verify(rebuild(s, lo=lo), topo).violation.kind == "structure"
    src = s.source.copy()
    src[0] = topo.nodes
    assert "source is not a node" in verify(rebuild(s, source=src), topo).violation.message
    rs = bfb_schedule(topo, Collective.REDUCESCATTER)
    assert verify(rs, topo, Collective.ALLGATHER).violation.kind == "structure"
    assert verify(s, build("torus(5, 5)")).violation.kind == "structure"


def _figure_1_tuples(first_hop=None):
    """Fig. 1's K_{2,2} allgather written by hand (parts: even | odd labels)."""
    rows = []
    for v in range(4):
        others = [w for w in range(4) if (w - v) % 2]
        same = next(w for w in range(4) if w != v and (w - v) % 2 == 0)
        for w in others:
            rows.append(((v, (0, 1)), (v, w), 1))
        rows.append(((v, (0, F(1, 2))), (others[0], same), 2))
        rows.append(((v, (F(1, 2), 1)), (others[1], same), 2))
    return rows


def test_hand_written_figure_1_passes():
    topo = build("bipartite(2)")
    report = verify(Schedule.from_tuples(Collective.ALLGATHER, 4, _figure_1_tuples()), topo)
    assert report.ok and report.steps == 2 and report.tau == F(3, 4)


def test_partial_overlap_is_caught_at_atom_precision():
    """Node 1 receives only [0, 1/2) of shard 0 in step 1 (the rest arrives in step 2), yet forwards
    [0, 3/4) in step 2: the checker names the missing piece [1/2, 3/4)."""
    rows = [r for r in _figure_1_tuples() if r[0][0] != 0 or r[2] != 2]
    rows = [r for r in rows if not (r[0][0] == 0 and r[1] == (0, 1))]
    rows += [((0, (0, F(1, 2))), (0, 1), 1), ((0, (F(1, 2), 1)), (0, 1), 2),
             ((0, (0, F(3, 4))), (1, 2), 2), ((0, (F(3, 4), 1)), (3, 2), 2)]
    v = verify(Schedule.from_tuples(Collective.ALLGATHER, 4, rows), build("bipartite(2)")).violation
    assert v.kind == "not_held" and v.step == 2 and v.sender == 1 and v.source == 0
    assert v.chunk == ("0", "3/4") and "lacks [1/2, 3/4)" in v.message


def test_raise_if_invalid():
    topo, s = _sched("torus(4, 6)")
    verify(s, topo).raise_if_invalid()
    with pytest.raises(ScheduleInvalid):
        verify(rebuild(s, keep=np.arange(s.transfers) != s.step_slice(s.steps).start), topo).raise_if_invalid()


def test_large_schedule_is_checked_in_source_blocks(monkeypatch):
    """The checker bounds its memory by processing sources in blocks; results do not depend on it."""
    import services.synthesis.schedule.verify as ver

    topo, s = _sched("genkautz(4, 64)")
    monkeypatch.setattr(ver, "STATE_BUDGET_BYTES", 64 * 8 * 5)
    assert verify(s, topo).ok
    report = verify(rebuild(s, keep=np.arange(s.transfers) != s.step_slice(s.steps).start), topo)
    assert report.violation.kind == "incomplete"
    rs = bfb_schedule(topo, Collective.REDUCESCATTER)
    assert verify(rs, topo).ok
    assert verify(rebuild(rs, extra=[0]), topo).violation.kind == "wrong_reduction"
