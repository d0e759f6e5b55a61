"""TopoOpt's TopologyFinder, CoinChangeMod and host forwarding (services.synthesis.evaluate.topoopt) against the
paper's vectors and direct computation."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from services.synthesis.evaluate.model_catalog import catalog_model
from services.synthesis.evaluate.topoopt import (co_optimise, coin_change, coin_route, forwarded_loads,
                                                 strategies_for, topology_finder)
from services.synthesis.schedule.cost import LinkModel


@settings(max_examples=40, deadline=None)
@given(st.integers(5, 40), st.data())
def test_coin_change_is_the_circulant_distance(n, data):
    coins = sorted(data.draw(st.sets(st.integers(1, n - 1), min_size=1, max_size=4)))
    dist, _ = coin_change(n, coins)
    g = nx.DiGraph([(x, (x + c) % n) for x in range(n) for c in coins])
    lengths = nx.single_source_shortest_path_length(g, 0)
    unreachable = np.iinfo(np.int64).max
    assert {delta for delta in range(n) if dist[delta] < unreachable} == set(lengths)
    for delta, length in lengths.items():
        assert dist[delta] == length
        path = coin_route(n, coins, 3 % n, (3 + delta) % n)
        assert len(path) - 1 == length and all((b - a) % n in coins for a, b in zip(path, path[1:]))


def test_forwarded_loads_match_shortest_path_flow():
    # a 4-cycle with one chord: every unit demand split over its shortest paths, checked by enumeration
    arcs = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]
    t, h = np.array([a for a, _ in arcs]), np.array([b for _, b in arcs])
    demand = np.ones((4, 4)) - np.eye(4)
    loads, far = forwarded_loads(4, t, h, demand)
    g = nx.DiGraph(arcs)
    expect = dict.fromkeys(arcs, 0.0)
    for s in range(4):
        for d in range(4):
            if s != d:
                paths = list(nx.all_shortest_paths(g, s, d))
                for p in paths:
                    for a, b in zip(p, p[1:]):
                        expect[(a, b)] += 1 / len(paths)
    assert loads.tolist() == pytest.approx([expect[a] for a in arcs])
    assert far == max(nx.shortest_path_length(g, s, d) for s in range(4) for d in range(4))


def test_topology_finder_splits_the_degree_by_traffic():
    n, d = 16, 8
    mp = np.zeros((n, n))
    mp[0, 1] = mp[1, 0] = 100.0                    # one heavy MP pair
    design = topology_finder(n, d, allreduce_bytes=10.0, mp_demand=mp)   # a ring allreduce: 2 (n-1) 10 = 300 B
    assert design.allreduce_degree == 5 and len(design.mp_links) == 3 * n          # ceil(8 * 300 / 500) rings
    topo = design.topology
    out = np.bincount(topo.tails, minlength=n)
    assert (out == d).all() and (np.bincount(topo.heads, minlength=n) == d).all()   # d-regular
    assert design.mp_links.count((0, 1)) == design.mp_links.count((1, 0)) == 3     # halved, still the heaviest
    only_ar = topology_finder(n, d, allreduce_bytes=1.0, mp_demand=np.zeros((n, n)))
    assert only_ar.allreduce_degree == d and not only_ar.mp_links and only_ar.bandwidth_tax == 1.0
    with pytest.raises(ValueError):
        topology_finder(n, d, 1.0, np.ones((3, 3)))


def test_co_optimise_keeps_dlrm_tables_model_parallel():
    model = catalog_model("dlrm", 16)
    link = LinkModel.from_units(1, 800)
    strategy, design, t = co_optimise(strategies_for(model, 16), 16, 8, link)
    assert strategy.name == "model-parallel"       # allreducing 41 G table parameters would be far slower
    assert design.bandwidth_tax >= 1.0 and design.longest_route >= 1
    assert t > 0
