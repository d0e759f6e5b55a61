"""Tests for services.synthesis.schedule.ir: the schedule IR (paper section 3, App. B; DESIGN section 2)."""
from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

from services.synthesis.schedule.ir import Collective, Op, Schedule, allreduce

# K_{2,2} (parts {0, 2} and {1, 3}) allgather in the style of Fig. 1: step 1 every node sends its whole
# shard to both neighbours; step 2 each node gets the shard of its own-part peer in two halves.
# K_{2,2} as a Cayley graph of Z_4 with generators {1, 3}: neighbours of x are x +- 1.
K22_AG = [
    *[((v, (0, 1)), (v, (v + s) % 4), 1) for v in range(4) for s in (1, 3)],
    *[((v, (F(0), F(1, 2))), ((v + 1) % 4, (v + 2) % 4), 2) for v in range(4)],
    *[((v, (F(1, 2), F(1))), ((v + 3) % 4, (v + 2) % 4), 2) for v in range(4)],
]


def _canon(tuples):
    """Tuples with a lane (0 when absent) and Fraction bounds, sorted, for comparison."""
    out = []
    for (v, (lo, hi)), link, t in tuples:
        lane = link[2] if len(link) == 3 else 0
        out.append(((v, (F(lo), F(hi))), (link[0], link[1], lane), t))
    return sorted(out)


def _mixed_schedule() -> Schedule:
    """Chunks with denominators 2, 3 and 4 (grid 12), an explicit lane and an empty middle step."""
    rows = [
        ((0, (F(0), F(1, 3))), (0, 1), 1),
        ((0, (F(1, 3), F(1))), (0, 1, 1), 1),
        ((1, (F(1, 4), F(1, 2))), (1, 2), 1),
        ((2, (F(1, 2), F(3, 4))), (2, 0), 3),
        ((1, (0, 1)), (2, 0, 1), 3),
    ]
    return Schedule.from_tuples(Collective.ALLGATHER, 3, rows, topology="ring(3, 2)")


# ----- construction and tuples --------------------------------------------------------------------------

def test_from_tuples_grid_is_lcm_of_denominators():
    s = _mixed_schedule()
    assert s.grid == 12
    assert s.steps == 3 and s.transfers == 5
    assert s.step_ptr.tolist() == [0, 3, 3, 5]
    assert s.ops.tolist() == [Op.COPY] * 3
    # columns are on the integer grid
    assert sorted(zip(s.lo.tolist(), s.hi.tolist())) == [(0, 4), (0, 12), (3, 6), (4, 12), (6, 9)]
    assert s.topology == "ring(3, 2)"


@pytest.mark.parametrize("bounds,grid", [
    ([(0, 1)], 1),
    ([(F(0), F(1, 2))], 2),
    ([(F(1, 6), F(1, 4))], 12),
    ([(F(1, 5), F(2, 7)), (F(0), F(1, 3))], 105),
    ([(F(3, 8), F(5, 8)), (F(1, 8), F(1, 4))], 8),
])
def test_grid_for_various_denominators(bounds, grid):
    rows = [((0, b), (0, 1), 1) for b in bounds]
    s = Schedule.from_tuples(Collective.ALLGATHER, 2, rows)
    assert s.grid == grid
    assert [(F(a, s.grid), F(b, s.grid)) for a, b in zip(s.lo.tolist(), s.hi.tolist())] == \
        [(F(a), F(b)) for a, b in bounds]


def test_tuples_returns_the_same_tuples():
    s = _mixed_schedule()
    out = list(s.tuples())
    for (v, (lo, hi)), (u, w, lane), t in out:
        assert isinstance(lo, F) and isinstance(hi, F)
    assert _canon(out) == _canon([
        ((0, (F(0), F(1, 3))), (0, 1), 1),
        ((0, (F(1, 3), F(1))), (0, 1, 1), 1),
        ((1, (F(1, 4), F(1, 2))), (1, 2), 1),
        ((2, (F(1, 2), F(3, 4))), (2, 0), 3),
        ((1, (0, 1)), (2, 0, 1), 3),
    ])
    assert [t for *_, t in out] == sorted(t for *_, t in out)        # yielded in step order
    k22 = Schedule.from_tuples(Collective.ALLGATHER, 4, K22_AG)
    assert k22.grid == 2
    assert _canon(k22.tuples()) == _canon(K22_AG)


def test_from_tuples_default_ops_per_collective():
    rows = [((0, (0, 1)), (1, 0), 1), ((1, (0, 1)), (0, 1), 2)]
    assert Schedule.from_tuples(Collective.ALLGATHER, 2, rows).ops.tolist() == [Op.COPY, Op.COPY]
    assert Schedule.from_tuples(Collective.REDUCESCATTER, 2, rows).ops.tolist() == [Op.REDUCE, Op.REDUCE]
    custom = Schedule.from_tuples(Collective.ALLREDUCE, 2, rows, ops=[Op.REDUCE, Op.COPY])
    assert custom.ops.tolist() == [Op.REDUCE, Op.COPY]


def test_from_arrays_rejects_steps_out_of_range():
    with pytest.raises(ValueError, match="step numbers"):
        Schedule.from_arrays(Collective.ALLGATHER, 2, 1, np.array([0]), [Op.COPY], source=[0], sender=[0],
                             receiver=[1], lane=[0], lo=[0], hi=[1])
    with pytest.raises(ValueError, match="step numbers"):
        Schedule.from_arrays(Collective.ALLGATHER, 2, 1, np.array([1, 2]), [Op.COPY], source=[0, 0],
                             sender=[0, 0], receiver=[1, 1], lane=[0, 0], lo=[0, 0], hi=[1, 1])


def test_from_arrays_sorts_by_step_and_step_of():
    s = Schedule.from_arrays(Collective.ALLGATHER, 3, 1, np.array([2, 1, 2, 1]), [Op.COPY, Op.COPY],
                             source=[10, 20, 30, 40], sender=[0, 1, 2, 0], receiver=[1, 2, 0, 1],
                             lane=[0, 0, 0, 0], lo=[0, 0, 0, 0], hi=[1, 1, 1, 1])
    assert s.step_ptr.tolist() == [0, 2, 4]
    assert s.source.tolist() == [20, 40, 10, 30]        # stable within a step
    assert s.step_of.tolist() == [1, 1, 2, 2]
    assert s.source[s.step_slice(2)].tolist() == [10, 30]


# ----- serialization ---------------------------------------------------------------------------------

def test_bytes_round_trip():
    s = _mixed_schedule()
    blob = s.to_bytes()
    assert isinstance(blob, bytes)
    r = Schedule.from_bytes(blob)
    assert r.collective is Collective.ALLGATHER
    assert (r.nodes, r.grid, r.topology) == (s.nodes, s.grid, s.topology)
    assert np.array_equal(r.step_ptr, s.step_ptr)
    assert np.array_equal(r.ops, s.ops)
    for k, v in s.columns().items():
        assert np.array_equal(r.columns()[k], v), k
        assert r.columns()[k].dtype == v.dtype, k
    assert list(r.tuples()) == list(s.tuples())


def test_bytes_round_trip_reduce_scatter_and_allreduce_metadata():
    ag = Schedule.from_tuples(Collective.ALLGATHER, 4, K22_AG, topology="bipartite(2)")
    rs = ag.reverse()
    for sched in (rs, allreduce(rs, ag)):
        r = Schedule.from_bytes(sched.to_bytes())
        assert r.collective is sched.collective
        assert r.topology == "bipartite(2)"
        assert r.ops.tolist() == sched.ops.tolist()
        assert list(r.tuples()) == list(sched.tuples())


def test_bytes_round_trip_unicode_topology_and_empty():
    s = Schedule.from_tuples(Collective.REDUCESCATTER, 5, [], topology="torus(3, 3) — ü")
    r = Schedule.from_bytes(s.to_bytes())
    assert r.topology == "torus(3, 3) — ü"
    assert (r.steps, r.transfers, r.nodes, r.collective) == (0, 0, 5, Collective.REDUCESCATTER)


# ----- reverse (Definition 5) -----------------------------------------------------------------------

def test_reverse_maps_tuples():
    ag = Schedule.from_tuples(Collective.ALLGATHER, 3, [
        ((0, (F(0), F(1, 2))), (0, 1), 1),
        ((0, (F(1, 2), F(1))), (0, 2, 1), 1),
        ((0, (F(0), F(1))), (1, 2), 2),
        ((1, (F(0), F(1))), (1, 2), 4),
    ], topology="g")
    rs = ag.reverse(topology="transpose(g)")
    assert rs.collective is Collective.REDUCESCATTER
    assert rs.topology == "transpose(g)"
    assert rs.steps == 4
    tmax = ag.steps
    expected = [((v, c), (w, u, lane), tmax - t + 1) for (v, c), (u, w, lane), t in ag.tuples()]
    assert _canon(rs.tuples()) == _canon(expected)
    assert rs.ops.tolist() == [Op.REDUCE] * 4
    assert rs.step_ptr.tolist() == [0, 1, 1, 2, 4]        # step 3 of the AG was empty -> step 2 of the RS
    assert ag.reverse().topology == "g"


def test_reverse_flips_collective_and_ops():
    rows = [((0, (0, 1)), (0, 1), 1), ((1, (0, 1)), (1, 0), 2), ((0, (0, 1)), (1, 0), 3)]
    s = Schedule.from_tuples(Collective.ALLGATHER, 2, rows, ops=[Op.COPY, Op.REDUCE, Op.REDUCE])
    r = s.reverse()
    assert r.collective is Collective.REDUCESCATTER
    assert r.ops.tolist() == [Op.COPY, Op.COPY, Op.REDUCE]     # reversed in time and flipped
    back = Schedule.from_tuples(Collective.REDUCESCATTER, 2, rows).reverse()
    assert back.collective is Collective.ALLGATHER
    assert back.ops.tolist() == [Op.COPY] * 3


@pytest.mark.parametrize("collective", [Collective.ALLGATHER, Collective.REDUCESCATTER])
def test_reverse_twice_is_identity(collective):
    s = Schedule.from_tuples(collective, 4, K22_AG, topology="bipartite(2)")
    rr = s.reverse().reverse()
    assert rr.collective is collective
    assert (rr.nodes, rr.grid, rr.topology) == (s.nodes, s.grid, s.topology)
    assert np.array_equal(rr.step_ptr, s.step_ptr)
    assert np.array_equal(rr.ops, s.ops)
    for k, v in s.columns().items():
        assert np.array_equal(rr.columns()[k], v), k
    assert list(rr.tuples()) == list(s.tuples())


def test_reverse_rejects_allreduce():
    ag = Schedule.from_tuples(Collective.ALLGATHER, 4, K22_AG)
    with pytest.raises(ValueError):
        allreduce(ag.reverse(), ag).reverse()


# ----- regrid / allreduce ---------------------------------------------------------------------------

def test_regrid():
    s = _mixed_schedule()
    r = s.regrid(36)
    assert r.grid == 36
    assert np.array_equal(r.lo, s.lo * 3) and np.array_equal(r.hi, s.hi * 3)
    assert list(r.tuples()) == list(s.tuples())
    assert s.grid == 12                                   # the original is untouched
    with pytest.raises(ValueError, match="not a multiple"):
        s.regrid(18)
    with pytest.raises(ValueError, match="not a multiple"):
        s.regrid(8)


@pytest.mark.parametrize("grid", [0, -12])
def test_regrid_rejects_non_positive_grid(grid):
    with pytest.raises(ValueError):
        _mixed_schedule().regrid(grid)


def test_allreduce_on_common_grid():
    ag = Schedule.from_tuples(Collective.ALLGATHER, 4, K22_AG, topology="bipartite(2)")        # grid 2
    rs_rows = [((v, (F(0), F(1, 3))), ((v + 1) % 4, v), 1) for v in range(4)] + \
              [((v, (F(1, 3), F(1))), ((v + 3) % 4, v), 1) for v in range(4)] + \
              [((v, (0, 1)), ((v + 2) % 4, (v + 1) % 4), 1) for v in range(4)]
    rs = Schedule.from_tuples(Collective.REDUCESCATTER, 4, rs_rows)                           # grid 3
    assert (rs.grid, ag.grid) == (3, 2)
    ar = allreduce(rs, ag)
    assert ar.collective is Collective.ALLREDUCE
    assert ar.grid == 6
    assert ar.steps == rs.steps + ag.steps == 3
    assert ar.ops.tolist() == [Op.REDUCE] + [Op.COPY, Op.COPY]
    assert ar.transfers == rs.transfers + ag.transfers
    assert ar.step_ptr.tolist() == [0, 12, 20, 28]
    expected = list(rs.tuples()) + [(c, link, t + rs.steps) for c, link, t in ag.tuples()]
    assert list(ar.tuples()) == expected
    assert ar.topology == rs.topology


def test_allreduce_rejects_wrong_collectives_and_sizes():
    ag = Schedule.from_tuples(Collective.ALLGATHER, 4, K22_AG)
    rs = ag.reverse()
    with pytest.raises(ValueError):
        allreduce(ag, rs)
    with pytest.raises(ValueError):
        allreduce(ag, ag)
    small = Schedule.from_tuples(Collective.ALLGATHER, 2, [((0, (0, 1)), (0, 1), 1)])
    with pytest.raises(ValueError, match="node counts"):
        allreduce(rs, small)


# ----- Collective.parse ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,collective", [
    ("allgather", Collective.ALLGATHER), ("AllGather", Collective.ALLGATHER), ("all-gather", Collective.ALLGATHER),
    ("all_gather", Collective.ALLGATHER), ("reduce-scatter", Collective.REDUCESCATTER),
    ("ReduceScatter", Collective.REDUCESCATTER), ("reduce_scatter", Collective.REDUCESCATTER),
    ("reducescatter", Collective.REDUCESCATTER), ("all_reduce", Collective.ALLREDUCE),
    ("AllReduce", Collective.ALLREDUCE), ("ALL-REDUCE", Collective.ALLREDUCE),
])
def test_collective_parse_accepts(text, collective):
    assert Collective.parse(text) is collective


@pytest.mark.parametrize("text", ["", "all", "broadcast", "all2all", "allgatherx", "reduce", "gather-all"])
def test_collective_parse_rejects(text):
    with pytest.raises(ValueError, match="unknown collective") as info:
        Collective.parse(text)
    assert "allgather" in str(info.value) and "reducescatter" in str(info.value)
