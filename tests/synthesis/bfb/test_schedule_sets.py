"""Schedule sets by size: exact cost curves, the lower envelope against brute force, and served sets
against independently built schedules (BFB LP (1), greedy) and the model checker."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.synthesis.bfb.greedy import greedy_allgather
from services.synthesis.bfb.lp import bfb_allgather
from services.synthesis.bfb.schedule_sets import schedule_sets
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.dependency import dependency_time
from services.synthesis.schedule.envelope import Curve, curve, integer_ranges, lower_envelope
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build

GBPS = 1e9 / 8
SAMPLES = (1, 1 << 10, 1 << 16, 1 << 20, 3 << 22, 1 << 26, 1 << 30, 1 << 33)


def _hetero(g, seed=0, alpha_mixed=False):
    rng = np.random.default_rng(seed)
    bw = np.full(g.arcs, 25 * GBPS)
    slow = rng.choice(g.arcs, min(4, g.arcs // 4), replace=False)
    bw[slow] = 5 * GBPS
    alpha = np.full(g.arcs, 10e-6)
    if alpha_mixed:                       # slow links with a short latency: steps whose cost has a break
        alpha[slow] = 1e-6
    return LinkCosts(g, alpha, bw)


def test_curve_equals_measured_time_with_mixed_latencies():
    g = build("torus(3, 4)")
    costs = _hetero(g, alpha_mixed=True)
    for s in (bfb_allgather(g).schedule, greedy_allgather(g, chunks=3).schedule):
        c = curve(s, costs)
        assert len(c.starts) > 1                      # mixed latencies make some step a true envelope
        for m in SAMPLES:
            assert float(c(m)) == pytest.approx(costs.time(s, m), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50),
                          st.integers(1, 60)), min_size=1, max_size=6))
def test_lower_envelope_against_brute_force(params):
    """Convex two-piece curves; the envelope's winner is no slower than any curve, ranges tile, and at every
    integer boundary the previous winner was no faster just before it."""
    curves = []
    for a, b, a2, b2, x in params:
        lo, hi = sorted((Fraction(b), Fraction(b2)))              # convex: slope grows at the break x
        start2 = Fraction(x)
        a_second = a + lo * start2 - hi * start2                  # continuous at x
        curves.append(Curve((Fraction(0), start2), (Fraction(a), a_second), (lo, hi)))
    spans = lower_envelope(curves)
    assert spans[0].start == 0 and spans[-1].end is None
    assert all(s.end == t.start for s, t in zip(spans, spans[1:]))
    for sp in spans:
        end = sp.end if sp.end is not None else sp.start + 100
        for m in (sp.start, (sp.start + end) / 2, end - Fraction(1, 1000)):
            assert curves[sp.index](m) == min(c(m) for c in curves)
    ranges = integer_ranges(spans)
    assert ranges[0][0] == 0 and ranges[-1][1] is None
    for (lo, hi, i), nxt in zip(ranges, ranges[1:] + [None]):
        assert hi == (nxt[0] if nxt else None)
        for m in {lo, (lo + (hi or lo + 100)) // 2, (hi or lo + 100) - 1}:
            assert curves[i](m) == min(c(m) for c in curves)


@pytest.mark.parametrize("expr,hetero", [("remove(torus(4, 4), 0>1, 5>6)", True), ("genkautz(3, 12)", True),
                                         ("ring(5)", False)])
def test_sets_tile_verify_and_beat_independent_schedules(expr, hetero):
    g = build(expr)
    costs = _hetero(g) if hetero else LinkCosts.uniform(g, LinkModel.from_units(10, 100))
    sets = schedule_sets(g, costs, greedy_chunks=(1, 2))
    # independent candidates: BFB's LP (1) and the greedy matcher, built here and priced by the dependency-driven
    # time; an allreduce is at most the best reduce-scatter then the best allgather with a barrier between
    ag = [bfb_allgather(g).schedule, greedy_allgather(g, chunks=2).schedule]
    gt = g.transpose()
    rs = [s.reverse(topology=g.expr) for s in (bfb_allgather(gt).schedule, greedy_allgather(gt, chunks=2).schedule)]
    others = {Collective.ALLGATHER: ag, Collective.REDUCESCATTER: rs}
    for c, ss in sets.items():
        rs_ = ss.ranges
        assert rs_[0].min_bytes == 0 and rs_[-1].max_bytes is None
        assert all(a.max_bytes == b.min_bytes and a.min_bytes < a.max_bytes for a, b in zip(rs_, rs_[1:]))
        for r in rs_:
            assert r.verified and verify(r.schedule, g, c).ok
        for m in SAMPLES:
            served = ss.at(m)
            t = dependency_time(served.schedule, costs, m)
            assert served.time_s(m) == pytest.approx(t, rel=1e-9)           # reported = measured
            assert served.barrier_time_s(m) == pytest.approx(costs.time(served.schedule, m), rel=1e-12)
            assert t <= served.barrier_time_s(m) * (1 + 1e-12)
            if c is Collective.ALLREDUCE:
                best = sum(min(dependency_time(s, costs, m) for s in others[k])
                           for k in (Collective.REDUCESCATTER, Collective.ALLGATHER))
                assert t <= best * (1 + 1e-9)
                continue
            for s in others[c]:
                assert t <= dependency_time(s, costs, m) * (1 + 1e-9)


def test_sets_from_candidates_built_elsewhere():
    """`built` candidates (as a revision's comparison has them) join as they are; with no scheduler of its
    own the set is their lower envelope, and a candidate that fails the model checker is never served."""
    g = build("remove(torus(4, 4), 0>1)")
    costs = LinkCosts.uniform(g, LinkModel.from_units(10, 100))
    gt = g.transpose()
    ag = [("bfb", bfb_allgather(g).schedule), ("greedy", greedy_allgather(g, chunks=4).schedule)]
    rs = [("bfb", bfb_allgather(gt).schedule.reverse(topology=g.expr))]
    full = ag[1][1]                                   # the greedy schedule without its last step: incomplete
    keep = full.step_of < full.steps
    bad = Schedule.from_arrays(Collective.ALLGATHER, g.nodes, full.grid, full.step_of[keep], full.ops[:-1], g.expr,
                               **{k: v[keep] for k, v in full.columns().items()})
    sets = schedule_sets(g, costs, schedulers=(), built={Collective.ALLGATHER: ag + [("broken", bad)],
                                                         Collective.REDUCESCATTER: rs})
    ar = sets[Collective.ALLREDUCE]
    assert {r.scheduler for r in sets[Collective.REDUCESCATTER].ranges} == {"bfb"}
    assert "broken" not in {r.scheduler for r in sets[Collective.ALLGATHER].ranges}
    for m in SAMPLES:
        best = min(dependency_time(s, costs, m) for _, s in ag)
        assert sets[Collective.ALLGATHER].time_s(m) == pytest.approx(best, rel=1e-9)
        assert ar.time_s(m) == pytest.approx(dependency_time(ar.at(m).schedule, costs, m), rel=1e-9)
        assert ar.time_s(m) <= (best + dependency_time(rs[0][1], costs, m)) * (1 + 1e-9)
        assert verify(ar.at(m).schedule, g, Collective.ALLREDUCE).ok


def test_checked_schedules_are_not_checked_again(monkeypatch):
    """`checked` (a revision's schedules its comparison model-checked) skips the model checker for exactly
    those objects: the others are still checked, so a broken one is never served."""
    import services.synthesis.bfb.schedule_sets as sets_mod

    g = build("remove(torus(4, 4), 0>1)")
    costs = LinkCosts.uniform(g, LinkModel.from_units(10, 100))
    ag = bfb_allgather(g).schedule
    rs = bfb_allgather(g.transpose()).schedule.reverse(topology=g.expr)
    seen = []

    def counting(s, topology, collective):
        seen.append((id(s), collective))
        return verify(s, topology, collective)

    monkeypatch.setattr(sets_mod, "verify", counting)
    built = {Collective.ALLGATHER: [("bfb", ag)], Collective.REDUCESCATTER: [("bfb", rs)]}
    schedule_sets(g, costs, schedulers=(), built=built)
    assert sorted(c.value for _, c in seen) == ["allgather", "reducescatter"]
    seen.clear()
    sets = schedule_sets(g, costs, schedulers=(), built=built, checked=[ag])
    assert seen == [(id(rs), Collective.REDUCESCATTER)]
    assert sets[Collective.ALLGATHER].ranges[0].schedule is ag and sets[Collective.ALLGATHER].ranges[0].verified
    seen.clear()
    schedule_sets(g, costs, schedulers=(), built=built, checked=[rs])    # the RS object listed: the allgather is
    assert seen == [(id(ag), Collective.ALLGATHER)]                       # still checked
    full = greedy_allgather(g, chunks=4).schedule                         # an incomplete allgather, not listed
    keep = full.step_of < full.steps
    bad = Schedule.from_arrays(Collective.ALLGATHER, g.nodes, full.grid, full.step_of[keep], full.ops[:-1], g.expr,
                               **{k: v[keep] for k, v in full.columns().items()})
    sets = schedule_sets(g, costs, schedulers=(), checked=[ag, rs],
                         built={Collective.ALLGATHER: [("broken", bad), ("bfb", ag)],
                                Collective.REDUCESCATTER: [("bfb", rs)]})
    assert {r.scheduler for r in sets[Collective.ALLGATHER].ranges} == {"bfb"}
