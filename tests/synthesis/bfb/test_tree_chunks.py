"""One chunk count for pipelined trees: `fabricplan schedule --links --size M` (bfb.compare) serves the tree
schedule a schedule set (bfb.schedule_sets) serves at M among the trees, not a second choice by a formula;
for an allreduce, the pair of phases the set composes (not each phase's own fastest chunk count)."""
from fractions import Fraction

import numpy as np
import pytest

from services.synthesis.bfb.compare import build_candidates
from services.synthesis.bfb.schedule_sets import schedule_sets, tree_chunk_options
from services.synthesis.forest.packing import pack_trees
from services.synthesis.schedule.dependency import dependency_curve
from services.synthesis.schedule.ir import Collective
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.topology.catalog import build

GBPS = 1e9 / 8
AG = Collective.ALLGATHER
RS, AR = Collective.REDUCESCATTER, Collective.ALLREDUCE


@pytest.fixture(scope="module")
def links():
    g = build("torus(4, 4)")
    rng = np.random.default_rng(5)
    bw = np.full(g.arcs, 100 * GBPS)
    bw[rng.choice(g.arcs, 5, replace=False)] = 25 * GBPS
    alpha = rng.uniform(2e-6, 12e-6, g.arcs)
    costs = LinkCosts(g, alpha, bw)
    return g, costs, schedule_sets(g, costs, (AG,), schedulers=("trees",))[AG]


@pytest.mark.parametrize("size", [1 << 10, 48 << 10, 1 << 20, 37 << 20, 1 << 30])
def test_schedule_serves_the_sets_tree_chunk_count(links, size):
    g, costs, sset = links
    assert len(tree_chunk_options(pack_trees(g, costs.bandwidth_Bps))) >= 2
    served = build_candidates(g, costs, float(size), collectives=(AG,), schedulers=("trees",))[AG][0].schedule
    chosen = sset.at(size)
    # the range's curve is the served (dependency-driven) time: the served schedule's, exactly
    assert dependency_curve(served, costs)(Fraction(size)) == chosen.curve(Fraction(size))
    assert served.steps == chosen.schedule.steps


@pytest.fixture(scope="module")
def all_sets(links):
    g, costs, _ = links
    return schedule_sets(g, costs, (AG, RS, AR), schedulers=("trees",))


@pytest.mark.parametrize("size", [1 << 10, 1 << 20, 37 << 20, 1 << 30])
@pytest.mark.parametrize("collective", [RS, AR])
def test_schedule_serves_the_sets_tree_phases(links, all_sets, collective, size):
    """At 1 MiB the set composes RS on 1 chunk with AG on 2 (165.5 us); each phase's own fastest count
    composed is 169.3 us: the allreduce must be the set's pair."""
    g, costs, _ = links
    served = build_candidates(g, costs, float(size), collectives=(collective,), schedulers=("trees",))[collective][0]
    chosen = all_sets[collective].at(size)
    assert dependency_curve(served.schedule, costs)(Fraction(size)) == chosen.curve(Fraction(size))
