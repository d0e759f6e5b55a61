"""Tree packings run event-driven (services.synthesis.forest.stream): every emitted schedule passes the model
checker and its dependency-driven time is the simulation's makespan; the bandwidth term never beats the cut bound."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.synthesis.forest.packing import cut_bound_seconds, pack_trees
from services.synthesis.forest.stream import PRIORITIES, fastest_stream, stream_allgather
from services.synthesis.schedule.dependency import dependency_time
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build
from tests.synthesis.forest.test_forest import GBPS, hetero_digraphs


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hetero_digraphs(), st.integers(1, 4), st.sampled_from([0.0, 1e-4, 1e-2, 1.0]), st.sampled_from(PRIORITIES),
       st.sampled_from([1 << 10, 1 << 20, 1 << 30]), st.sampled_from([np.inf, 0.25, 0.0]), st.integers(0, 2 ** 31))
def test_stream_schedule_verifies_and_its_time_is_the_simulation(case, pieces, batch, priority, size, grow, seed):
    g, bw = case
    rng = np.random.default_rng(seed)
    costs = LinkCosts(g, rng.uniform(0, 2e-5, g.arcs), bw.astype(float) * GBPS)
    pk = pack_trees(g, costs.bandwidth_Bps)
    r = stream_allgather(pk, costs, size, pieces, batch * pk.bandwidth_seconds(size), priority, grow)
    assert verify(r.schedule, g).ok
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
