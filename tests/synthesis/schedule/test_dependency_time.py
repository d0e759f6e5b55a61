"""Dependency-driven time (DESIGN section 2): the compiled longest path against a brute-force event simulation
(per grid unit, events in time order) on random small schedules; never above the step-synchronous price; equal to
it for BFB on uniform links; uniform LinkModel and LinkCosts agree; the per-source dense numbering and the sorted
fallback agree; a schedule reading data its sender lacks is refused."""
from __future__ import annotations

import heapq
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.synthesis.bfb.lp import bfb_schedule
from services.synthesis.schedule import dependency
from services.synthesis.schedule.cost import LinkModel, heterogeneous_time
from services.synthesis.schedule.dependency import critical_path, dependency_curve, dependency_time
from services.synthesis.schedule.ir import Collective, Op, Schedule
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build
from services.synthesis.topology.graph import Topology


def event_simulation(s: Schedule, costs: LinkCosts, size_bytes: float) -> float:
    """Brute force, written from the definition: groups (link, step) with static dependencies found per grid unit
    (a location's writers: its last COPY of an earlier step, the other copies of that step, and every REDUCE
    since; none for data held from the start), then a discrete-event run: at each event time every idle link
    whose next group (step order) has all its dependencies finished starts it."""
    g = costs.topology
    unit = size_bytes / (s.grid if s.collective is Collective.ALLTOALL else s.nodes * s.grid)
    arc = g.arc_index(s.sender, s.receiver, s.lane)
    all_held = s.collective in (Collective.REDUCESCATTER, Collective.ALLREDUCE)
    writers: dict[tuple[int, int, int], set] = {}
    deps: dict[tuple[int, int], set] = {}
    size: dict[tuple[int, int], float] = {}
    for t in range(1, s.steps + 1):
        sl = s.step_slice(t)
        for i in range(sl.start, sl.stop):
            grp = (int(arc[i]), t)
            deps.setdefault(grp, set())
            size[grp] = size.get(grp, 0.0) + (s.hi[i] - s.lo[i]) * unit
            v, u = int(s.source[i]), int(s.sender[i])
            for x in range(int(s.lo[i]), int(s.hi[i])):
                if (v, u, x) not in writers and not (all_held or u == v):
                    return math.inf
                deps[grp] |= writers.get((v, u, x), set())
        copied = set()
        for i in range(sl.start, sl.stop):
            grp = (int(arc[i]), t)
            v, w = int(s.source[i]), int(s.receiver[i])
            for x in range(int(s.lo[i]), int(s.hi[i])):
                key = (v, w, x)
                if s.ops[t - 1] == Op.COPY and key not in copied:
                    writers[key] = set()
                    copied.add(key)
                writers[key] = writers.get(key, set()) | {grp}
    queue = {}
    for grp in sorted(deps, key=lambda k: k[1]):
        queue.setdefault(grp[0], []).append(grp)
    busy, done, events, now = set(), {}, [], 0.0
    while True:
        for l, q in queue.items():
            if l not in busy and q and all(d in done for d in deps[q[0]]):
                grp = q.pop(0)
                busy.add(l)
                heapq.heappush(events, (now + costs.alpha_s[l] + size[grp] / costs.bandwidth_Bps[l], grp))
        if not events:
            assert not any(queue.values()), "deadlock"
            return max(done.values(), default=0.0)
        now, grp = heapq.heappop(events)
        done[grp] = now
        busy.discard(grp[0])


def _random_case(seed: int, nodes: int, steps: int, grid: int, kind: str):
    rng = np.random.default_rng(seed)
    tails, heads = [], []
    for u in range(nodes):
        for w in range(nodes):
            if u != w:
                for _ in range(1 + int(rng.random() < 0.3)):
                    tails.append(u)
                    heads.append(w)
    g = Topology(nodes, tails, heads, f"random({seed})")
    collective = {"ag": Collective.ALLGATHER, "rs": Collective.REDUCESCATTER, "ar": Collective.ALLREDUCE,
                  "a2a": Collective.ALLTOALL}[kind]
    if collective is Collective.ALLTOALL:
        grid *= nodes
    held = np.zeros((nodes, nodes, grid), dtype=bool)
    held[np.arange(nodes), np.arange(nodes), :] = True
    if collective in (Collective.REDUCESCATTER, Collective.ALLREDUCE):
        held[:] = True
    reduce_steps = {Collective.REDUCESCATTER: steps, Collective.ALLREDUCE: steps // 2}.get(collective, 0)
    ops = [Op.REDUCE] * reduce_steps + [Op.COPY] * (steps - reduce_steps)
    rows = []
    for t in range(1, steps + 1):
        new = held.copy()
        for _ in range(int(rng.integers(1, 2 * nodes + 1))):
            v, u = int(rng.integers(nodes)), int(rng.integers(nodes))
            units = np.flatnonzero(held[v, u])
            if units.size == 0:
                continue
            lo = int(rng.choice(units))
            hi = lo + 1
            while hi < grid and held[v, u, hi] and rng.random() < 0.5:
                hi += 1
            out = np.flatnonzero(g.tails == u)
            a = int(rng.choice(out))
            w, lane = int(g.heads[a]), int(g.lanes[a])
            rows.append((v, u, w, lane, lo, hi, t))
            new[v, w, lo:hi] = True
        held = new
    if not rows:
        rows.append((0, 0, int(g.heads[0]) if g.tails[0] == 0 else 1, 0, 0, 1, 1))
    r = np.array(rows, dtype=np.int64)
    s = Schedule.from_arrays(collective, nodes, grid, r[:, 6], ops, source=r[:, 0], sender=r[:, 1],
                             receiver=r[:, 2], lane=r[:, 3], lo=r[:, 4], hi=r[:, 5])
    costs = LinkCosts(g, rng.uniform(0, 20e-6, g.arcs), rng.choice([1e9, 2.5e9, 5e9, 12.5e9], g.arcs))
    return s, costs


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31), nodes=st.integers(2, 5), steps=st.integers(1, 6), grid=st.integers(1, 4),
       kind=st.sampled_from(["ag", "rs", "ar", "a2a"]), size=st.sampled_from([0.0, 1e3, 1 << 20, 3e8]))
def test_longest_path_matches_an_event_simulation(seed, nodes, steps, grid, kind, size):
    s, costs = _random_case(seed, nodes, steps, grid, kind)
    want = event_simulation(s, costs, size)
    assert math.isfinite(want)
    p = critical_path(s, costs, size)
    assert p.seconds == pytest.approx(want, rel=1e-12, abs=1e-18)
    assert p.at(size) == pytest.approx(p.seconds, rel=1e-12, abs=1e-18)
    # never above the step-synchronous price, and the path's affine piece is a lower bound elsewhere
    assert p.seconds <= heterogeneous_time(s, costs.topology, costs.alpha_s, costs.bandwidth_Bps, size) * (1 + 1e-12)
    for other in (0.0, 1e4, 1e9):
        assert p.at(other) <= dependency_time(s, costs, other) * (1 + 1e-12) + 1e-18


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), nodes=st.integers(2, 6), steps=st.integers(1, 7),
       kind=st.sampled_from(["ag", "rs", "ar", "a2a"]))
def test_the_exact_curve_is_the_time_at_every_size(seed, nodes, steps, kind):
    """The curve found from the longest paths' lines equals the priced time at sizes spread over 0..2^40,
    its breakpoints included, and is convex (slopes increase)."""
    s, costs = _random_case(seed, nodes, steps, 3, kind)
    c = dependency_curve(s, costs)
    assert list(c.b) == sorted(c.b) and list(c.starts) == sorted(c.starts)
    sizes = [0.0, 1.0, 1e3, 1e5, 1e6, 3e7, 1e9, 2.0**40] + [float(x) for x in c.starts]
    sizes += [float(x) * (1 + 1e-6) for x in c.starts] + [float(x) * (1 - 1e-6) for x in c.starts]
    for m in sizes:
        assert float(c(m)) == pytest.approx(dependency_time(s, costs, m), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("expr", ["ring(8)", "biring(9)", "torus(4,4)", "hypercube(4)", "genkautz(3,20)",
                                  "complete(6)", "circulant(12,1,5)"])
@pytest.mark.parametrize("collective", [Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE])
def test_uniform_bfb_dependency_time_equals_the_barrier_price(expr, collective):
    g = build(expr)
    s = bfb_schedule(g, collective)
    report = verify(s, g).raise_if_invalid()
    link = LinkModel.from_units(10, 100)
    for size in (1e3, float(1 << 20), float(1 << 30)):
        barrier = link.time(report.steps, report.tau, size)
        assert dependency_time(s, link, size, degree=g.degree) == pytest.approx(barrier, rel=1e-12)
        assert dependency_time(s, LinkCosts.uniform(g, link), size) == pytest.approx(barrier, rel=1e-12)


def test_hand_computed_chain_beats_the_barrier():
    """ring(4), alpha 0, link 2->3 ten times slower (10 us per shard, the others 1 us). Step 1: 0->1 (shard 0)
    and 2->3 (shard 2); step 2: 1->2 (shard 0); step 3: 3->0 (shard 2). Barrier: 10 + 1 + 1 = 12 us.
    Dependency: 1->2 runs 1..2 us, 3->0 waits for shard 2 at node 3 (10 us) and runs 10..11 us: 11 us, all of it
    bandwidth (latency 0, per byte 11 us / M)."""
    g = build("ring(4)")
    tuples = [((0, (0, 1)), (0, 1), 1), ((2, (0, 1)), (2, 3), 1), ((0, (0, 1)), (1, 2), 2),
              ((2, (0, 1)), (3, 0), 3)]
    s = Schedule.from_tuples(Collective.ALLGATHER, 4, tuples)
    size = 4e6                                               # shard 1 MB
    bw = np.full(4, 1e12)
    bw[g.arc_index([2], [3], [0])[0]] = 1e11
    costs = LinkCosts(g, np.zeros(4), bw)
    assert heterogeneous_time(s, g, costs.alpha_s, bw, size) == pytest.approx(12e-6)
    p = critical_path(s, costs, size)
    assert p.seconds == pytest.approx(11e-6)
    assert (p.latency_s, p.per_byte_s * size) == pytest.approx((0.0, 11e-6))
    assert event_simulation(s, costs, size) == pytest.approx(11e-6)


def test_the_sorted_fallback_numbers_locations_as_the_dense_one(monkeypatch):
    for seed in range(20):
        s, costs = _random_case(seed, 4, 5, 3, ["ag", "rs", "ar", "a2a"][seed % 4])
        want = dependency_time(s, costs, 1e6)
        monkeypatch.setattr(dependency, "_DENSE_BUDGET", 0)
        assert dependency_time(s, costs, 1e6) == want
        monkeypatch.undo()


def test_reading_data_the_sender_lacks_is_refused():
    s = Schedule.from_tuples(Collective.ALLGATHER, 3, [((0, (0, 1)), (1, 2), 1)])
    with pytest.raises(ValueError, match="never holds"):
        dependency_time(s, LinkModel(1e-6, 1e9), 1e6, degree=2)


def test_bad_inputs():
    s = Schedule.from_tuples(Collective.ALLGATHER, 2, [((0, (0, 1)), (0, 1), 1), ((1, (0, 1)), (1, 0), 1)])
    with pytest.raises(ValueError, match="degree"):
        dependency_time(s, LinkModel(1e-6, 1e9), 1e6)
    with pytest.raises(ValueError, match="size_bytes"):
        dependency_time(s, LinkModel(1e-6, 1e9), -1, degree=1)
    with pytest.raises(TypeError):
        dependency_time(s, object(), 1.0, degree=1)
    off_ring = Schedule.from_tuples(Collective.ALLGATHER, 3, [((0, (0, 1)), (0, 2), 1)])
    with pytest.raises(ValueError, match="does not have"):
        dependency_time(off_ring, LinkCosts.uniform(build("ring(3)"), LinkModel(1e-6, 1e9)), 1.0)


@pytest.mark.parametrize("nodes, degree, collective", [(16, 2, Collective.ALLREDUCE), (32, 4, Collective.ALLGATHER),
                                                       (24, 3, Collective.REDUCESCATTER),
                                                       (12, 4, Collective.ALLREDUCE)])
def test_frontier_constructions_take_their_step_price_on_uniform_links(nodes, degree, collective):
    """On uniform links every frontier entry's construction (the schedule `construct` ships for it) takes exactly
    its (steps, tau) price when run without barriers: the frontier's, select's and training's times, computed from
    (steps, tau), are the dependency-driven time there (DESIGN section 2)."""
    from services.synthesis.search.construct import construct
    from services.synthesis.search.finder import frontier

    link = LinkModel.from_units(10, 100)
    for entry in frontier(nodes, degree, collective=collective):
        built = construct(entry.expr, collective)
        report = verify(built.schedule, built.topology, collective).raise_if_invalid()
        for size in (1e3, float(1 << 20), float(1 << 30)):
            barrier = link.time(report.steps, report.tau, size)
            served = dependency_time(built.schedule, link, size, degree=built.topology.degree)
            assert served == pytest.approx(barrier, rel=1e-12), entry.expr
