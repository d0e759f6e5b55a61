"""The greedy link-chunk scheduler (TACOS, dissertation ch. 5) and the comparison that serves the faster
verified schedule (issue 14)."""
import math
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.synthesis.bfb import compare as compare_mod
from services.synthesis.bfb.compare import Candidate, build_candidates, choose, priced, schedule_collectives
from services.synthesis.bfb.greedy import greedy_allgather, greedy_schedule
from services.synthesis.bfb.lp import bfb_allgather
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.verify import ScheduleInvalid, verify
from services.synthesis.topology.catalog import build

MB = float(1 << 20)
PAPER_LINKS = LinkModel.from_units(10, 100)

VERTEX_TRANSITIVE = ["complete(6)", "bipartite(4)", "ring(9)", "ring(6, 2)", "biring(9)", "circulant(13, 2, 3)",
                     "circulant(40)", "circulant(20, 1, 3)", "dcirculant(9, 1, 3)", "dcirculant(12, 1, 5, 7)",
                     "hamming(2, 4)", "hypercube(5)", "torus(4, 6)", "torus(3, 3, 3)", "twisted_torus(8, 4)",
                     "product(ring(4), ring(8))", "circulant(30, 2, 7)"]


def _in_links(g) -> np.ndarray:
    other = g.tails != g.heads
    return np.bincount(g.heads[other], minlength=g.nodes)


def check_greedy(g, chunks: int, seed: int = 0):
    r = greedy_allgather(g, chunks=chunks, seed=seed)
    report = verify(r.schedule, g)
    assert report.ok, report.violation
    n = g.nodes
    assert r.schedule.transfers == n * (n - 1) * chunks          # every node gets every chunk exactly once
    assert report.steps == r.steps and report.tau == r.tau == F(g.degree * r.steps, n * chunks)
    assert r.steps >= max(g.diameter, math.ceil((n - 1) * chunks / _in_links(g).min()))
    # one chunk per link per step (a TEN edge carries at most one chunk)
    key = (r.schedule.step_of.astype(np.int64) * g.arcs + g.arc_index(r.schedule.sender, r.schedule.receiver,
                                                                          r.schedule.lane))
    assert np.unique(key).size == key.size
    return r


@st.composite
def strongly_connected(draw):
    n = draw(st.integers(2, 12))
    perm = draw(st.permutations(list(range(n))))
    arcs = [(perm[i], perm[(i + 1) % n]) for i in range(n)]
    arcs += draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    return n, arcs


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strongly_connected(), st.integers(1, 3), st.integers(0, 5))
def test_greedy_is_verified_on_random_digraphs(case, chunks, seed):
    n, arcs = case
    g = build(f"edges({n}, {', '.join(f'{a}>{b}' for a, b in arcs)})")
    check_greedy(g, chunks, seed)
    for collective in (Collective.REDUCESCATTER, Collective.ALLREDUCE):
        assert verify(greedy_schedule(g, collective, chunks=chunks, seed=seed), g).ok


@pytest.mark.parametrize("expr", VERTEX_TRANSITIVE)
def test_greedy_is_never_better_than_bfb_on_vertex_transitive_families(expr):
    """Both T_L and T_B at least BFB's, so T = steps alpha + tau M/B is at least BFB's for every M."""
    g = build(expr)
    bfb = bfb_allgather(g)
    for chunks in (1, 2):
        r = check_greedy(g, chunks)
        assert r.steps >= g.diameter and r.tau >= bfb.tau


def test_greedy_on_a_ring_fills_every_link():
    r = check_greedy(build("ring(7)"), 1)
    assert r.steps == 6 and r.tau == F(6, 7)              # BW-optimal: each step every link carries a shard


def test_greedy_is_reproducible_by_seed():
    g = build("remove(circulant(20, 1, 3), 0>1)")
    a, b = greedy_allgather(g, seed=3), greedy_allgather(g, seed=3)
    for col in ("source", "sender", "receiver", "lane", "lo", "hi"):
        assert np.array_equal(getattr(a.schedule, col), getattr(b.schedule, col))


def test_greedy_prefers_the_cheapest_link():
    """ring(2, 2): node 1 needs one chunk and two parallel links can bring it; the cheaper one does."""
    g = build("ring(2, 2)")
    for slow_lane in (0, 1):
        cost = np.ones(g.arcs)
        cost[g.arc_index([0], [1], [slow_lane])[0]] = 5.0
        r = greedy_allgather(g, link_cost=cost)
        into_1 = r.schedule.receiver == 1
        assert r.schedule.lane[into_1].tolist() == [1 - slow_lane]


def test_greedy_reduce_scatter_uses_the_transpose_links():
    g = build("remove(genkautz(3, 20), 0>19)")
    cost = np.linspace(1.0, 2.0, g.arcs)
    rs = greedy_schedule(g, Collective.REDUCESCATTER, link_cost=cost)
    assert verify(rs, g).ok
    ar = greedy_schedule(g, Collective.ALLREDUCE, link_cost=cost, chunks=2)
    report = verify(ar, g)
    assert report.ok and ar.grid == 2


@pytest.mark.parametrize("kw,message", [({"chunks": 0}, "chunks must be a positive integer"),
                                        ({"chunks": 1.5}, "chunks must be a positive integer"),
                                        ({"link_cost": [1.0, 2.0]}, "one finite number per arc"),
                                        ({"link_cost": [np.nan] * 8}, "one finite number per arc")])
def test_greedy_bad_input(kw, message):
    with pytest.raises(ValueError, match=message):
        greedy_allgather(build("torus(2, 2)"), **kw)


def test_greedy_size_limit(monkeypatch):
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
