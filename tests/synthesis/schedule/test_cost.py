"""Tests for services.synthesis.schedule.cost: the alpha-beta model, Moore bounds and the link loads measured from a
schedule (paper section 3.2, App. C; digest 1.5-1.6, 4.12, 5.5 and 13)."""
from __future__ import annotations

import signal
from contextlib import contextmanager
from fractions import Fraction as F

import numpy as np
import pytest

from services.synthesis.topology.catalog import build
from services.synthesis.schedule.cost import (LinkModel, heterogeneous_time, is_moore_optimal, measured_tau,
                                     moore_nodes, moore_steps, optimal_tau, step_max_loads,
                                     undirected_moore_steps)
from services.synthesis.schedule.ir import Collective, Schedule

from tests.conftest import HANG_S

MB = 2 ** 20


# ----- Moore bounds ------------------------------------------------------------------------------------

# digest 1.6: k*(N, d) = min{k : M_{d,k} >= N}
MOORE_RANGES = {
    4: [(2, 5, 1), (6, 21, 2), (22, 85, 3), (86, 341, 4), (342, 1365, 5), (1366, 5461, 6)],
    2: [(2, 3, 1), (4, 7, 2), (8, 15, 3), (16, 31, 4), (32, 63, 5), (64, 127, 6)],
}


@pytest.mark.parametrize("d", sorted(MOORE_RANGES))
def test_moore_steps_ranges(d):
    for lo, hi, k in MOORE_RANGES[d]:
        for n in range(lo, hi + 1):
            assert moore_steps(n, d) == k, (n, d)


def test_moore_nodes():
    assert [moore_nodes(4, k) for k in range(7)] == [1, 5, 21, 85, 341, 1365, 5461]
    assert [moore_nodes(2, k) for k in range(7)] == [1, 3, 7, 15, 31, 63, 127]
    assert [moore_nodes(3, k) for k in range(4)] == [1, 4, 13, 40]
    assert [moore_nodes(1, k) for k in range(5)] == [1, 2, 3, 4, 5]         # M_{1,k} = k + 1
    for d in range(2, 9):
        for k in range(6):
            assert moore_nodes(d, k) == sum(d ** i for i in range(k + 1))


def test_moore_steps_edge_cases():
    assert moore_steps(1, 4) == 0
    assert [moore_steps(n, 1) for n in range(1, 8)] == [0, 1, 2, 3, 4, 5, 6]   # a directed ring: N - 1
    assert moore_steps(1024, 4) == 5 and moore_steps(1024, 2) == 10 and moore_steps(1024, 10) == 3
    for d in (2, 3, 5, 16):
        for k in range(1, 5):
            assert moore_steps(moore_nodes(d, k), d) == k
            assert moore_steps(moore_nodes(d, k) + 1, d) == k + 1


# Table 8 (d = 4): N -> T_L** (undirected Moore bound)
TABLE8_TLSS = {6: 2, 9: 2, 10: 2, 14: 2, 15: 2, 16: 2, 21: 3, 26: 3, 32: 3, 35: 3, 45: 3, 70: 4, 80: 4,
               189: 5, 728: 6}
# Table 8: N -> (T_L, T_L*) for the same rows
TABLE8_TL = {6: (2, 2), 9: (2, 2), 10: (3, 2), 14: (3, 2), 15: (3, 2), 16: (4, 2), 21: (3, 2), 26: (3, 3),
             32: (4, 3), 35: (3, 3), 45: (4, 3), 70: (7, 3), 80: (4, 3), 189: (6, 4), 728: (6, 5)}


@pytest.mark.parametrize("nodes,expected", sorted(TABLE8_TLSS.items()))
def test_undirected_moore_steps_table8(nodes, expected):
    assert undirected_moore_steps(nodes, 4) == expected


@pytest.mark.parametrize("nodes,row", sorted(TABLE8_TL.items()))
def test_table8_directed_moore_and_optimality(nodes, row):
    tl, tl_star = row
    assert moore_steps(nodes, 4) == tl_star
    assert is_moore_optimal(nodes, 4, tl) is (tl == tl_star)


def test_undirected_moore_steps_small_degrees():
    # an undirected 2-regular graph is a cycle: k = floor(N / 2)
    assert [undirected_moore_steps(n, 2) for n in range(1, 10)] == [0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert undirected_moore_steps(2, 1) == 1
    with pytest.raises(ValueError):
        undirected_moore_steps(3, 1)
    # 1 + 3 + 6 = 10 (Petersen graph is a Moore graph of degree 3 and diameter 2)
    assert undirected_moore_steps(10, 3) == 2 and undirected_moore_steps(11, 3) == 3
    # never below the directed bound
    for d in (2, 3, 4, 6):
        for n in range(2, 300):
            assert undirected_moore_steps(n, d) >= moore_steps(n, d)


@contextmanager
def _deadline(seconds: float):
    def _alarm(signum, frame):
        raise TimeoutError(f"did not return within {seconds} s")
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("fn", [moore_steps, undirected_moore_steps])
def test_degree_zero_is_rejected(fn):
    with _deadline(HANG_S):                  # a hang guard: a zero degree once looped forever
        with pytest.raises(ValueError):
            fn(5, 0)


def test_is_moore_optimal():
    # Moore optimal iff N > M_{d,k-1}
    assert is_moore_optimal(1024, 4, 5)           # Pi_{4,1024}, Table 4
    assert not is_moore_optimal(1024, 4, 6)       # L^3(C(16,{3,4}))
    assert is_moore_optimal(342, 4, 5) and not is_moore_optimal(341, 4, 5)
    assert is_moore_optimal(8, 2, 3)              # Diamond: M_{2,2} = 7 < 8
    assert not is_moore_optimal(16, 2, 5)         # DBJMod(2,4): T_L = 5
    assert is_moore_optimal(6, 4, 2) and is_moore_optimal(5, 4, 1)
    assert is_moore_optimal(1, 4, 0)
    for d in (2, 3, 4):
        for n in range(2, 200):
            k = moore_steps(n, d)
            assert is_moore_optimal(n, d, k)
            assert not is_moore_optimal(n, d, k + 1)


def test_line_graph_preserves_moore_optimality():
    # Theorem 8: L^n(G) is Moore optimal iff G is; kautz(4, n) = L^n(K_5) with diameter n + 1
    for n in range(4):
        t = build(f"kautz(4, {n})")
        assert is_moore_optimal(t.nodes, t.degree, t.diameter)
    for n in range(3):
        t = build(f"line(circulant(16, 3, 4), {n})") if n else build("circulant(16, 3, 4)")
        assert not is_moore_optimal(t.nodes, t.degree, t.diameter)


def test_optimal_tau():
    assert optimal_tau(1024) == F(1023, 1024)
    assert optimal_tau(2) == F(1, 2)
    assert optimal_tau(1) == 0
    assert isinstance(optimal_tau(9), F) and optimal_tau(9) == F(8, 9)


# ----- alpha-beta model -----------------------------------------------------------------------------

def test_link_model_units():
    m = LinkModel.from_units(10, 100)
    assert m.alpha_s == pytest.approx(10e-6)
    assert m.node_bandwidth_Bps == pytest.approx(12.5e9)
    assert m.time(0, 1, MB) == pytest.approx(83.886e-6, abs=1e-9)     # M/B for M = 1 MB, B = 100 Gbps
    assert m.time(3, 0, MB) == pytest.approx(30e-6)
    assert m.time(2, F(1, 2), MB) == pytest.approx(20e-6 + 0.5 * MB / 12.5e9)


# Table 4 (N = 1024, d = 4): (T_L in alpha, tau, allreduce time in us)
TABLE4 = [
    ("genkautz(4, 1024)", 5, F(341, 256), 323.5),
    ("line(circulant(16, 3, 4), 3)", 6, F(15, 16) + F(4, 3) * (F(1, 16) - F(1, 1024)), 291.0),
    ("L^2(Diamond^2)", 8, F(63, 64) + F(4, 3) * (F(1, 64) - F(1, 1024)), 328.4),
    ("L(DBJMod(2,4)^2)", 11, F(255, 256) + F(1, 256), 387.8),
    ("(UniRing(1,4) x UniRing(1,8))^2", 20, F(1023, 1024), 567.6),
    ("theoretical bound", 5, F(1023, 1024), 267.6),
]


@pytest.mark.parametrize("name,steps,tau,allreduce_us", TABLE4)
def test_table4_allreduce_times(name, steps, tau, allreduce_us):
    m = LinkModel.from_units(10, 100)
    t = m.collective_time(Collective.ALLREDUCE, steps, tau, MB)
    assert t * 1e6 == pytest.approx(allreduce_us, abs=0.05)


def test_collective_time_ag_and_rs_cost_the_same():
    m = LinkModel.from_units(10, 100)
    ag = m.collective_time(Collective.ALLGATHER, 5, F(341, 256), MB)
    rs = m.collective_time(Collective.REDUCESCATTER, 5, F(341, 256), MB)
    ar = m.collective_time(Collective.ALLREDUCE, 5, F(341, 256), MB)
    assert ag == rs == m.time(5, F(341, 256), MB)
    assert ar == pytest.approx(2 * ag)
    assert ag * 1e6 == pytest.approx(161.74, abs=0.01)


# ----- loads measured from a schedule ---------------------------------------------------------------

def _hand_made() -> Schedule:
    """3 nodes, grid 4. Step 1: two lanes of 0->1 carry half a shard each (different links), plus 1->2.
    Step 2: two transfers on the same link 1->2 lane 0 (1/4 + 1/2 shard: loads add) and 0->1, 2->1 into
    the same receiver (different links). Step 3: empty. Step 4: one whole shard on 2->0 lane 1."""
    rows = [
        ((0, (F(0), F(1, 2))), (0, 1, 0), 1),
        ((0, (F(1, 2), F(1))), (0, 1, 1), 1),
        ((1, (F(0), F(1, 4))), (1, 2, 0), 1),
        ((0, (F(0), F(1, 4))), (1, 2, 0), 2),
        ((1, (F(0), F(1, 2))), (1, 2, 0), 2),
        ((2, (F(0), F(1, 2))), (0, 1, 0), 2),
        ((1, (F(0), F(1, 2))), (2, 1, 0), 2),
        ((2, (F(0), F(1))), (2, 0, 1), 4),
    ]
    return Schedule.from_tuples(Collective.ALLGATHER, 3, rows)


def test_step_max_loads_parallel_lanes_and_shared_links():
    s = _hand_made()
    assert s.grid == 4 and s.steps == 4
    assert step_max_loads(s).tolist() == [2, 3, 0, 4]
    # d = 2: tau = (d / N) * sum_t maxload_t (in shards) = (2/3) * (2 + 3 + 0 + 4)/4
    assert measured_tau(s, 2) == F(3, 2)
    assert measured_tau(s, 4) == F(3)


def test_lanes_are_distinct_links_but_same_lane_adds():
    one_lane = Schedule.from_tuples(Collective.ALLGATHER, 2, [
        ((0, (F(0), F(1, 2))), (0, 1, 0), 1), ((0, (F(1, 2), F(1))), (0, 1, 0), 1)])
    two_lanes = Schedule.from_tuples(Collective.ALLGATHER, 2, [
        ((0, (F(0), F(1, 2))), (0, 1, 0), 1), ((0, (F(1, 2), F(1))), (0, 1, 1), 1)])
    assert step_max_loads(one_lane).tolist() == [2]
    assert step_max_loads(two_lanes).tolist() == [1]
    assert measured_tau(one_lane, 2) == 2 * measured_tau(two_lanes, 2)
    # opposite directions of a pair are different links too
    duplex = Schedule.from_tuples(Collective.ALLGATHER, 2, [
        ((0, (0, 1)), (0, 1), 1), ((1, (0, 1)), (1, 0), 1)])
    assert step_max_loads(duplex).tolist() == [1]


def test_measured_tau_is_grid_invariant():
    s = _hand_made()
    assert measured_tau(s.regrid(60), 2) == measured_tau(s, 2)
    assert step_max_loads(s.regrid(60)).tolist() == [30, 45, 0, 60]


def test_measured_tau_of_known_schedules():
    # K_{2,2} (Fig. 1 style): tau = (2d - 1) / (2d) = 3/4, BW-optimal
    k22 = Schedule.from_tuples(Collective.ALLGATHER, 4, [
        *[((v, (0, 1)), (v, (v + s) % 4), 1) for v in range(4) for s in (1, 3)],
        *[((v, (F(0), F(1, 2))), ((v + 1) % 4, (v + 2) % 4), 2) for v in range(4)],
        *[((v, (F(1, 2), F(1))), ((v + 3) % 4, (v + 2) % 4), 2) for v in range(4)],
    ])
    assert step_max_loads(k22).tolist() == [2, 1]
    assert measured_tau(k22, 2) == F(3, 4) == optimal_tau(4)
    # classic UniRing(1, m): at step t node u forwards shard u - t + 1; tau = (m - 1)/m
    m = 7
    ring = Schedule.from_tuples(Collective.ALLGATHER, m, [
        (((u - t + 1) % m, (0, 1)), (u, (u + 1) % m), t) for t in range(1, m) for u in range(m)])
    assert step_max_loads(ring).tolist() == [1] * (m - 1)
    assert measured_tau(ring, 1) == optimal_tau(m)
    # the same chunks spread over 2 lanes of UniRing(2, m): same tau with d = 2
    ring2 = Schedule.from_tuples(Collective.ALLGATHER, m, [
        (((u - t + 1) % m, (F(lane, 2), F(lane + 1, 2))), (u, (u + 1) % m, lane), t)
        for t in range(1, m) for u in range(m) for lane in (0, 1)])
    assert measured_tau(ring2, 2) == optimal_tau(m)


def test_heterogeneous_time_reduces_to_the_homogeneous_model():
    topo = build("ring(3, 2)")
    s = _hand_made()
    # the hand-made schedule uses the arc 2->1, which ring(3, 2) lacks
    with pytest.raises(ValueError, match="link the topology does not have"):
        heterogeneous_time(s, topo, np.full(topo.arcs, 1e-5), np.full(topo.arcs, 1e9), MB)
    m = 7
    ring2 = Schedule.from_tuples(Collective.ALLGATHER, m, [
        (((u - t + 1) % m, (F(lane, 2), F(lane + 1, 2))), (u, (u + 1) % m, lane), t)
        for t in range(1, m) for u in range(m) for lane in (0, 1)])
    topo = build(f"ring({m}, 2)")
    model = LinkModel.from_units(10, 100)
    link_bw = model.node_bandwidth_Bps / topo.degree
    t = heterogeneous_time(ring2, topo, np.full(topo.arcs, model.alpha_s), np.full(topo.arcs, link_bw), MB)
    assert t == pytest.approx(model.time(ring2.steps, measured_tau(ring2, topo.degree), MB))
    # one slow link slows every step it is used in
    slow = np.full(topo.arcs, link_bw)
    slow[0] = link_bw / 2
    t_slow = heterogeneous_time(ring2, topo, np.full(topo.arcs, model.alpha_s), slow, MB)
    per_step_extra = (MB / m / 2) / (link_bw / 2) - (MB / m / 2) / link_bw
    assert t_slow == pytest.approx(t + (m - 1) * per_step_extra)
