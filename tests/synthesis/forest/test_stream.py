"""Tree packings run event-driven (services.synthesis.forest.stream): every emitted schedule passes the model
checker and its dependency-driven time is the simulation's makespan; the bandwidth term never beats the cut bound."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.synthesis.forest.packing import cut_bound_seconds, pack_trees
from services.synthesis.forest.stream import PRIORITIES, fastest_stream, stream_allgather, stream_grid, taper_units
from services.synthesis.schedule.dependency import dependency_time
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build
from tests.synthesis.forest.test_forest import GBPS, hetero_digraphs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hetero_digraphs(), st.integers(1, 5), st.sampled_from([0.0, 1e-4, 1e-2, 1.0]), st.sampled_from(PRIORITIES),
       st.sampled_from([1 << 10, 1 << 20, 1 << 30]), st.sampled_from([np.inf, 0.25, 0.0]),
       st.sampled_from([np.inf, 0.85, 0.1]), st.integers(0, 4), st.integers(0, 2 ** 31))
def test_stream_schedule_verifies_and_its_time_is_the_simulation(case, pieces, batch, priority, size, grow, feed,
                                                                 taper, seed):
    """Any options (message caps, growth, the feed limit, tapered pieces, every priority): the schedule verifies,
    its dependency-driven time is the simulated makespan, and it never beats the cut bound."""
    g, bw = case
    rng = np.random.default_rng(seed)
    costs = LinkCosts(g, rng.uniform(0, 2e-5, g.arcs), bw.astype(float) * GBPS)
    pk = pack_trees(g, costs.bandwidth_Bps)
    taper = min(taper, pieces - 1)
    r = stream_allgather(pk, costs, size, pieces, batch * pk.bandwidth_seconds(size), priority, grow, feed, taper)
    assert verify(r.schedule, g).ok
    assert r.schedule.grid == pk.per_root * int(taper_units(pieces, taper).sum())
    assert dependency_time(r.schedule, costs, size) == pytest.approx(r.time_s, rel=1e-9)
    assert r.time_s >= cut_bound_seconds(g, costs.bandwidth_Bps, size) * (1 - 1e-9)


@pytest.mark.parametrize("seed", [1, 4])
def test_fastest_stream_on_a_torus_with_slow_arcs(seed):
    """torus(8, 8), six 5 Gbps arcs, alpha 10 us, 1 GiB: the chosen option's schedule verifies and is priced at
    its simulated time; it is never faster than the cut bound (how close it comes is bench.schedules' to show)."""
    g = build("torus(8, 8)")
    bw = np.full(g.arcs, 25 * GBPS)
    bw[np.random.default_rng(seed).choice(g.arcs, 6, replace=False)] = 5 * GBPS
    costs = LinkCosts(g, np.full(g.arcs, 10e-6), bw)
    r = fastest_stream(pack_trees(g, bw), costs, 1 << 30)
    assert verify(r.schedule, g).ok
    assert dependency_time(r.schedule, costs, 1 << 30) == pytest.approx(r.time_s, rel=1e-9)
    assert r.time_s >= cut_bound_seconds(g, bw, 1 << 30)


def test_taper_units_halve_the_last_pieces_and_reject_bad_counts():
    assert taper_units(4, 0).tolist() == [1, 1, 1, 1]
    assert taper_units(5, 3).tolist() == [8, 8, 4, 2, 1]
    for bad in (-1, 5, True, 1.5):
        with pytest.raises(ValueError):
            taper_units(5, bad)


def test_grid_adds_the_fed_options_only_within_their_budget():
    """The fed, tapered options run where FED_BUDGET allows them (64 nodes), never where it does not."""
    g = build("torus(8, 8)")
    pk = pack_trees(g, np.full(g.arcs, 25 * GBPS))
    fed = [o for o in stream_grid(pk) if o[4] < np.inf]
    rows = len(pk.trees) * (g.nodes - 1)
    assert fed and sum(rows * o[1] for o in fed) <= 1 << 20
    assert all(o[0] == "work" and o[5] > 0 for o in fed)


def test_fed_stream_on_the_two_tier_torus_is_within_half_a_percent_of_the_cut_bound():
    """torus(8, 8) as 8 rows of 8 (arcs within a row 25 Gbps, between rows 5 Gbps), alpha 10 us, 1 GiB: every arc
    is tight, and the fed, tapered options bring the served stream within 1.005x the cut bound (the unfed grid's
    best is 1.0100x); its schedule verifies and is priced at its simulated time."""
    g = build("torus(8, 8)")
    bw = np.where(g.tails // 8 == g.heads // 8, 25.0, 5.0) * GBPS
    costs = LinkCosts(g, np.full(g.arcs, 10e-6), bw)
    r = fastest_stream(pack_trees(g, bw), costs, 1 << 30)
    bound = cut_bound_seconds(g, bw, 1 << 30)
    assert r.feed < np.inf and r.taper > 0
    assert bound <= r.time_s <= 1.005 * bound
    assert verify(r.schedule, g).ok
    assert dependency_time(r.schedule, costs, 1 << 30) == pytest.approx(r.time_s, rel=1e-9)
