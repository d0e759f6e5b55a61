"""TACOS, the event-driven greedy link-chunk scheduler (dissertation ch. 5), and the comparison that serves
the faster verified schedule."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.synthesis.bfb import compare as compare_mod
from services.synthesis.bfb.compare import Candidate, build_candidates, choose, priced, schedule_collectives
from services.synthesis.bfb.greedy import (ChunkLayout, chunk_options, greedy_allgather, greedy_schedule,
                                           tacos_allgather)
from services.synthesis.bfb.lp import bfb_allgather
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.dependency import dependency_time
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.verify import ScheduleInvalid, verify
from services.synthesis.topology.catalog import build

MB = float(1 << 20)
PAPER_LINKS = LinkModel.from_units(10, 100)

GBPS = 1e9 / 8


def random_costs(g, rng) -> LinkCosts:
    return LinkCosts(g, rng.choice([1e-6, 10e-6], g.arcs), rng.choice([5 * GBPS, 25 * GBPS], g.arcs))


def check_tacos(g, costs=None, size=1 << 20, **layout):
    r = greedy_allgather(g, costs=costs, size_bytes=size if costs is not None else None, **layout)
    report = verify(r.schedule, g)
    assert report.ok, report.violation
    n = g.nodes
    assert r.schedule.transfers == (n - 1) * r.layout.count(n)      # every node gets every chunk exactly once
    # replayed as the runtimes run it (each link in step order, each transfer waiting for its data), the schedule
    # is never slower than the simulation, and exactly as fast when no link waited in it
    links = costs if costs is not None else LinkCosts(g, np.zeros(g.arcs), np.ones(g.arcs))
    replay = dependency_time(r.schedule, links, size if costs is not None else g.nodes)
    assert replay == r.time_s and replay <= r.simulated_s * (1 + 1e-12)
    if r.waits == 0:
        assert replay == pytest.approx(r.simulated_s, rel=1e-12, abs=0)
    arc = g.arc_index(r.schedule.sender, r.schedule.receiver, r.schedule.lane)
    for a in np.unique(arc):                                          # one chunk at a time per link
        on = np.flatnonzero(arc == a)
        assert (np.diff(r.schedule.step_of[on]) > 0).all()
        assert (r.start_s[on][1:] >= r.finish_s[on][:-1] - 1e-15).all()
    return r


@st.composite
def strongly_connected(draw):
    n = draw(st.integers(2, 12))
    perm = draw(st.permutations(list(range(n))))
    arcs = [(perm[i], perm[(i + 1) % n]) for i in range(n)]
    arcs += draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    return n, arcs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strongly_connected(), st.integers(1, 3), st.integers(0, 3), st.integers(1, 3), st.integers(0, 5))
def test_tacos_is_verified_and_replays_exactly_on_random_heterogeneous_digraphs(case, chunks, halvings, every, seed):
    n, arcs = case
    g = build(f"edges({n}, {', '.join(f'{a}>{b}' for a, b in arcs)})")
    costs = random_costs(g, np.random.default_rng(seed))
    check_tacos(g, costs, chunks=chunks, halvings=halvings, every=every, seed=seed)
    for collective in (Collective.REDUCESCATTER, Collective.ALLREDUCE):
        s = greedy_schedule(g, collective, costs=costs, size_bytes=1 << 20, chunks=chunks, seed=seed)
        assert verify(s, g).ok


def test_tacos_reduce_scatter_takes_the_time_of_the_allgather_it_reverses():
    """Reversing a timed allgather of G^T gives a timed reduce-scatter of G of the same length, so the
    dependency-driven time (each link in step order, a reduce waiting for every partial sum before it) is no
    longer."""
    g = build("remove(genkautz(3, 20), 0>19)")
    costs = random_costs(g, np.random.default_rng(7))
    gt = g.transpose()
    ag_t = greedy_allgather(gt, costs=costs.transposed(gt), size_bytes=1 << 20, chunks=2)
    rs = ag_t.schedule.reverse(topology=g.expr)
    assert verify(rs, g).ok
    assert dependency_time(rs, costs, 1 << 20) <= ag_t.simulated_s * (1 + 1e-12)


@pytest.mark.parametrize("expr", ["ring(7)", "torus(4, 4)", "hypercube(4)", "circulant(13, 2, 3)"])
def test_tacos_keeps_every_link_busy_on_symmetric_graphs(expr):
    """Unit costs (a shard per unit of time per link, no latency): no node receives its N - 1 shards in less
    than (N - 1) / d. With 4 chunks per shard TACOS takes exactly that on a ring, a torus, a hypercube and a
    circulant: every in-link of every node busy from start to end."""
    g = build(expr)
    r = check_tacos(g, chunks=4)
    assert r.time_s == pytest.approx((g.nodes - 1) / g.degree)


def test_tacos_is_reproducible_by_seed():
    g = build("remove(circulant(20, 1, 3), 0>1)")
    costs = random_costs(g, np.random.default_rng(1))
    a, b = (greedy_allgather(g, seed=3, costs=costs, size_bytes=1e6, halvings=2) for _ in range(2))
    assert a.time_s == b.time_s
    for col in ("source", "sender", "receiver", "lane", "lo", "hi"):
        assert np.array_equal(getattr(a.schedule, col), getattr(b.schedule, col))


def test_tacos_prefers_the_cheapest_link():
    """ring(2, 2): node 1 needs one chunk and two parallel links can bring it; the faster one does."""
    g = build("ring(2, 2)")
    for slow_lane in (0, 1):
        bw = np.full(g.arcs, 25 * GBPS)
        bw[g.arc_index([0], [1], [slow_lane])[0]] = 5 * GBPS
        r = greedy_allgather(g, costs=LinkCosts(g, np.full(g.arcs, 1e-6), bw), size_bytes=1e6)
        into_1 = r.schedule.receiver == 1
        assert r.schedule.lane[into_1].tolist() == [1 - slow_lane]


def test_a_slow_link_waits_when_the_fast_ones_finish_sooner():
    """ring(2, 2) with one lane 100x slower and the shard in 8 chunks: the slow lane would finish its chunk
    after the fast lane brought all 8, so it carries nothing and the time is the fast lane's."""
    g = build("ring(2, 2)")
    bw = np.full(g.arcs, 25 * GBPS)
    bw[g.arc_index([0], [1], [1])[0]] = 0.25 * GBPS
    costs = LinkCosts(g, np.zeros(g.arcs), bw)
    r = check_tacos(g, costs, size=2e6, chunks=8)
    into_1 = r.schedule.receiver == 1
    assert r.schedule.lane[into_1].tolist() == [0] * 8
    assert r.time_s == pytest.approx(1e6 / (25 * GBPS))


def test_chunk_layouts():
    lay = ChunkLayout(2, 3, every=2)
    src, lo, hi = lay.table(3)
    assert lay.grid == 16 and lay.count(3) == 2 * 4 + 2 + 2 * 4 == src.size
    for v in range(3):                      # every shard's chunks tile [0, grid)
        mine = np.flatnonzero(src == v)
        assert lo[mine][0] == 0 and hi[mine][-1] == 16 and (lo[mine][1:] == hi[mine][:-1]).all()
    assert (hi - lo)[src == 0].tolist() == [4, 2, 1, 1, 4, 2, 1, 1] and (hi - lo)[src == 1].tolist() == [8, 8]
    assert [(x.chunks, x.halvings, x.every) for x in chunk_options(64)] == \
        [(1, 0, 1), (1, 3, 16), (1, 4, 32), (1, 2, 1), (2, 0, 1), (4, 0, 1), (4, 1, 1)]
    assert len(chunk_options(2048)) == 1 and chunk_options(4096) == []       # the budget, then the limit


def test_tacos_allgather_keeps_the_fastest_layout():
    g = build("torus(4, 4)")
    bw = np.full(g.arcs, 25 * GBPS)
    bw[:3] = 5 * GBPS
    costs = LinkCosts(g, np.full(g.arcs, 10e-6), bw)
    best = tacos_allgather(g, costs, 1 << 30)
    each = [greedy_allgather(g, chunks=x.chunks, halvings=x.halvings, every=x.every, costs=costs,
                             size_bytes=1 << 30).time_s for x in chunk_options(16)]
    assert best.time_s == min(each)


@pytest.mark.parametrize("kw,message", [({"chunks": 0}, "chunks must be a positive integer"),
                                        ({"chunks": 1.5}, "chunks must be a positive integer"),
                                        ({"halvings": -1}, "halvings must be an integer"),
                                        ({"every": 0}, "every must be an integer"),
                                        ({"costs": "x"}, "size_bytes must be a positive number")])
def test_tacos_bad_input(kw, message):
    with pytest.raises((ValueError, AttributeError), match=message):
        greedy_allgather(build("torus(2, 2)"), **kw)


def test_tacos_size_limit(monkeypatch):
    monkeypatch.setattr("services.synthesis.bfb.greedy.MAX_GREEDY_TRANSFERS", 100)
    with pytest.raises(ValueError, match="the limit is 100"):
        greedy_allgather(build("torus(4, 4)"))


# ---------------------------------------------------------------------------------------------------
# serving the faster verified schedule
# ---------------------------------------------------------------------------------------------------
def test_bfb_is_served_for_small_messages_and_greedy_for_large_ones_on_a_degraded_kautz_graph():
    g = build("remove(genkautz(4, 64), 0>63)")
    costs = LinkCosts.uniform(g, PAPER_LINKS)
    small = schedule_collectives(g, costs, MB, collectives=[Collective.ALLGATHER], verify_mode="all")
    large = schedule_collectives(g, costs, 1e9, collectives=[Collective.ALLGATHER], verify_mode="all")
    s, l = small[Collective.ALLGATHER], large[Collective.ALLGATHER]
    assert s.chosen.scheduler == "bfb" and l.chosen.scheduler == "greedy"
    by = {c.scheduler: c for c in l.candidates}
    assert by["greedy"].tau < by["bfb"].tau and by["greedy"].steps > by["bfb"].steps
    for c in l.candidates:              # the cost served is the cost measured from the schedule
        assert c.verified and c.time_s == pytest.approx(PAPER_LINKS.time(c.steps, c.tau, 1e9))
        assert c.time_s == pytest.approx(costs.time(c.schedule, 1e9))          # step by step, the same
    assert l.as_dict()["chosen"] == "greedy" and len(l.as_dict()["candidates"]) == 2


def test_choose_never_serves_a_schedule_that_fails_the_model_checker():
    g = build("torus(3, 3)")
    costs = LinkCosts.uniform(g, PAPER_LINKS)
    good = bfb_allgather(g).schedule
    keep = np.arange(good.transfers) != 0                    # drop one transfer: some node misses a chunk
    broken = Schedule.from_arrays(Collective.ALLGATHER, g.nodes, good.grid, good.step_of[keep], good.ops, g.expr,
                                  **{k: v[keep] for k, v in good.columns().items()})
    fake = priced("broken", broken, costs, MB)
    fake.time_s = 0.0                                        # pretend it is the fastest
    real = priced("bfb", good, costs, MB)
    out = choose(g, Collective.ALLGATHER, [real, fake], MB)
    assert out.chosen.scheduler == "bfb" and out.chosen.verified
    assert fake.verified is False and fake.violation["kind"] in ("incomplete", "not_held")
    with pytest.raises(ScheduleInvalid):
        choose(g, Collective.ALLGATHER, [priced("broken", broken, costs, MB)], MB)
    with pytest.raises(ValueError, match="verify_mode"):
        choose(g, Collective.ALLGATHER, [real], MB, verify_mode="some")


def test_choose_verifies_only_until_one_passes_by_default():
    g = build("remove(torus(4, 4), 0>1)")
    out = schedule_collectives(g, LinkCosts.uniform(g, PAPER_LINKS), MB, collectives=[Collective.ALLREDUCE])
    cmp = out[Collective.ALLREDUCE]
    assert cmp.chosen.scheduler == "bfb" and cmp.chosen.verified
    assert [c.verified for c in cmp.candidates] == [True, None]


def test_greedy_candidate_is_skipped_beyond_its_limit(monkeypatch):
    monkeypatch.setattr(compare_mod, "MAX_GREEDY_TRANSFERS", 10)
    g = build("torus(3, 3)")
    cands = build_candidates(g, LinkCosts.uniform(g, PAPER_LINKS), MB, collectives=[Collective.ALLGATHER])
    greedy = next(c for c in cands[Collective.ALLGATHER] if c.scheduler == "greedy")
    assert greedy.schedule is None and "exceed the greedy scheduler's limit" in greedy.skipped
    out = choose(g, Collective.ALLGATHER, cands[Collective.ALLGATHER], MB, verify_mode="all")
    assert out.chosen.scheduler == "bfb" and out.as_dict()["candidates"][1]["skipped"]
    with pytest.raises(ValueError, match="unknown scheduler 'magic'"):
        build_candidates(g, LinkCosts.uniform(g, PAPER_LINKS), MB, schedulers=("magic",))


def test_candidate_dict_shape():
    c = Candidate("greedy", None, skipped="too big")
    assert c.as_dict() == {"scheduler": "greedy", "verified": None, "skipped": "too big"}
    with pytest.raises(ValueError, match="no schedule was built: greedy: too big"):
        choose(build("ring(3)"), Collective.ALLGATHER, [c], MB)


def test_allreduce_checked_by_its_phases_agrees_with_the_full_check():
    g = build("remove(genkautz(3, 20), 0>19)")
    out = schedule_collectives(g, LinkCosts.uniform(g, PAPER_LINKS), MB, verify_mode="all")
    for c in out[Collective.ALLREDUCE].candidates:
        assert c.phases is not None and c.verified
        full = verify(c.schedule, g)
        assert (c.report.ok, c.report.steps, c.report.tau, c.report.transfers) == \
            (full.ok, full.steps, full.tau, full.transfers)
    # a broken phase: the composition does not vouch, the full check decides (and finds the fault)
    from services.synthesis.schedule.ir import allreduce
    from services.synthesis.schedule.verify import verify_allreduce_phases

    ag = bfb_allgather(g).schedule
    rs = greedy_schedule(g, Collective.REDUCESCATTER)
    keep = np.arange(rs.transfers) != 5
    bad_rs = Schedule.from_arrays(Collective.REDUCESCATTER, g.nodes, rs.grid, rs.step_of[keep], rs.ops, g.expr,
                                  **{k: v[keep] for k, v in rs.columns().items()})
    composed = verify_allreduce_phases(verify(bad_rs, g), verify(ag, g), 99)
    assert not composed.ok and composed.violation is not None
    assert not verify(allreduce(bad_rs, ag), g).ok


def test_served_schedule_is_the_fastest_as_the_runtimes_run_it():
    """torus(3, 4) with one 6.25 Gbps link: at 16 KiB LP (14) is served, at 1 MiB TACOS; each candidate's time
    is its schedule's dependency-driven time, never above its step-synchronous price, and the served one is the
    fastest verified candidate."""
    g = build("torus(3, 4)")
    bw = np.full(g.arcs, 25 * GBPS)
    bw[g.arc_index([0], [1], [0])[0]] = 6.25 * GBPS
    costs = LinkCosts(g, np.full(g.arcs, 10e-6), bw)
    served = {}
    for size in (1 << 14, 1 << 20):
        cands = build_candidates(g, costs, size, collectives=[Collective.ALLGATHER],
                                 schedulers=("bfb-hetero", "bfb", "greedy"))[Collective.ALLGATHER]
        out = choose(g, Collective.ALLGATHER, cands, size, verify_mode="all")
        for c in out.candidates:
            assert c.verified and c.time_s == dependency_time(c.schedule, costs, size)
            assert c.time_s <= c.barrier_time_s * (1 + 1e-12)
        assert out.chosen is min(out.candidates, key=lambda c: c.time_s)
        served[size] = out.chosen.scheduler
    assert served == {1 << 14: "bfb-hetero", 1 << 20: "greedy"}
