"""The finder's evaluator (services.synthesis.bfb.price) against the full BFB solve, and its kernels against
brute force: random regular digraphs (parallel arcs and self-loops included), Cayley graphs, and the
generalized Kautz graphs whose last-step types are runs of the in-arc cycle."""
from __future__ import annotations

import itertools
from fractions import Fraction

import networkx as nx
import numpy as np
import pytest

from services.synthesis.bfb import price as bfb_price
from services.synthesis.bfb.lp import bfb_allgather, eligibility_masks
from services.synthesis.topology.catalog import build
from services.synthesis.topology.distances import bfs_distances
from services.synthesis.bfb.kernels import (circulant_eccentricities, interval_u_star, step_types, step_u_star_by_runs,
                                            type_bounds)
from services.synthesis.topology.graph import Topology, TopologyError


def random_regular_digraph(n: int, d: int, seed: int) -> Topology:
    """Union of d random permutations (arcs x -> p_k(x)): d-regular, may have parallel arcs and self-loops;
    redrawn until strongly connected."""
    rng = np.random.default_rng(seed)
    while True:
        heads = np.concatenate([rng.permutation(n) for _ in range(d)])
        tails = np.tile(np.arange(n), d)
        try:
            return Topology(n, tails, heads, f"random({n}, {d}, {seed})")
        except TopologyError:
            continue


def brute_u_star(masks, counts, d: int) -> Fraction:
    """max over every nonempty set S of in-arcs of (sources whose eligible arcs all lie in S) / |S|."""
    best = Fraction(0)
    for s in range(1, 1 << d):
        load = sum(c for m, c in zip(masks, counts) if m & ~s == 0)
        best = max(best, Fraction(load, bin(s).count("1")))
    return best


@pytest.mark.parametrize("seed", range(24))
def test_random_digraphs_match_the_full_solve(seed):
    n = 5 + seed % 17
    d = 1 + seed % 5
    topo = random_regular_digraph(n, d, seed)
    full = bfb_allgather(topo, workers=1)
    for method in ("zeta", "cut", "auto"):
        assert bfb_price.bfb_tau(topo, method=method) == (topo.diameter, full.tau), method


@pytest.mark.parametrize("expr", ["ring(7, 3)", "biring(9, 4)", "twisted_torus(4, 6, 2)", "hamming(2, 4)",
                                  "circulant(40, 3, 7, 11)", "dcirculant(30, 1, 4, 9)", "complete(6)",
                                  "bipartite(4)", "circulant(16, 1, 1, 4)", "hypercube(4)"])
def test_vertex_transitive_shortcut_matches_the_full_solve(expr):
    topo = build(expr)
    assert topo.translation is not None
    full = bfb_allgather(topo, workers=1, shortcut=False)
    for method in ("zeta", "cut"):
        assert bfb_price.bfb_tau(topo, method=method) == (topo.diameter, full.tau), method


@pytest.mark.parametrize("expr", ["genkautz(5, 97)", "genkautz(7, 120)", "genkautz(3, 200)", "genkautz(16, 150)",
                                  "line(circulant(10, 1, 3))", "product(genkautz(2, 7), ring(3))",
                                  "debruijn(2, 6)"])
def test_structured_graphs_match_the_full_solve(expr):
    topo = build(expr)
    full = bfb_allgather(topo, workers=1)
    assert bfb_price.bfb_tau(topo) == (topo.diameter, full.tau)


def test_degree_beyond_the_mask_width_is_refused():
    from services.synthesis.bfb.lp import ScheduleTooLarge

    for expr in ("complete(64)", "genkautz(63, 70)"):
        with pytest.raises(ScheduleTooLarge, match="degree at most 62"):
            bfb_price.bfb_tau(build(expr))
    assert bfb_price.bfb_tau(build("complete(63)")) == (1, Fraction(62, 63))


def test_unknown_method_is_rejected():
    with pytest.raises(ValueError, match="method"):
        bfb_price.bfb_tau(build("ring(4)"), method="simplex")


def _types_by_masks(topo: Topology, t: int):
    """Per receiver, {mask: count} at step t from the distance matrix (the definition, no bitsets)."""
    dist = topo.distance_matrix
    w = topo.tails[topo.in_arcs]
    out = []
    for u in range(topo.nodes):
        dc = dist[:, u].astype(np.int64)
        masks = eligibility_masks(dc, dist[:, w[u]])
        sel = dc == t
        keys, counts = np.unique(masks[sel], return_counts=True)
        out.append(dict(zip(keys.tolist(), counts.tolist())))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_step_types_are_the_eligibility_classes(seed):
    topo = random_regular_digraph(12 + seed, 2 + seed % 3, 100 + seed)
    preds = np.ascontiguousarray(topo.in_predecessors, dtype=np.int64)
    for t, prev, ball in topo.balls(reverse=True):
        offsets, masks, counts = step_types(prev, ball, preds)
        expected = _types_by_masks(topo, t)
        for u in range(topo.nodes):
            got = dict(zip(masks[offsets[u]:offsets[u + 1]].tolist(), counts[offsets[u]:offsets[u + 1]].tolist()))
            assert got == expected[u], (t, u)
    assert t == topo.diameter


@pytest.mark.parametrize("seed", [1072, 1108, 1150, 1217, 1258, 1289] + list(range(200, 212)))
def test_receivers_priced_by_runs_equal_brute_force(seed):
    """Every receiver the run kernel prices alone (`step_u_star_by_runs`, ok True) has U* equal to max_S
    load(S)/|S| over its eligibility classes. Seeds 1072-1289: a receiver with two sources of two runs each and
    two sources eligible on every in-arc, which the run count once took for one run each (U* 3 for 2)."""
    topo = random_regular_digraph(6 + seed % 35, 1 + seed % 6, seed)
    d = topo.degree
    preds = np.ascontiguousarray(topo.in_predecessors, dtype=np.int64)
    for t, prev, ball in topo.balls(reverse=True):
        num, den, ok = step_u_star_by_runs(prev, ball, preds, np.ones(topo.nodes, dtype=np.bool_))
        expected = _types_by_masks(topo, t)
        for u in np.flatnonzero(ok).tolist():
            masks, counts = list(expected[u]), list(expected[u].values())        # none: nothing at distance t
            assert Fraction(int(num[u]), int(den[u])) == brute_u_star(masks, counts, d), (t, u)
    full = bfb_allgather(topo, workers=1)
    assert bfb_price.bfb_tau(topo) == (topo.diameter, full.tau)


def test_type_bounds_bracket_the_exact_value():
    rng = np.random.default_rng(7)
    d = 5
    for _ in range(40):
        k = int(rng.integers(1, 7))
        masks = rng.integers(1, 1 << d, size=k)
        counts = rng.integers(1, 9, size=k)
        offsets = np.array([0, k], dtype=np.int64)
        alone, sources, used, upper, multi = type_bounds(offsets, masks, counts, d)
        exact = brute_u_star(masks.tolist(), counts.tolist(), d)
        assert max(Fraction(int(alone[0])), Fraction(int(sources[0]), int(used[0]))) <= exact <= upper[0]
        assert bool(multi[0]) == any(bin(int(m)).count("1") > 1 for m in masks)


def _cyclic_runs(d: int):
    for start, length in itertools.product(range(d), range(1, d + 1)):
        if length == d and start:
            continue
        yield sum(1 << ((start + i) % d) for i in range(length))


def test_interval_windows_equal_brute_force():
    rng = np.random.default_rng(11)
    for d in (3, 4, 6):
        runs = list(_cyclic_runs(d))
        problems = []
        for _ in range(30):
            k = int(rng.integers(1, 8))
            problems.append((rng.choice(runs, size=k), rng.integers(1, 20, size=k)))
        offsets = np.cumsum([0] + [m.size for m, _ in problems]).astype(np.int64)
        masks = np.concatenate([m for m, _ in problems]).astype(np.int64)
        counts = np.concatenate([c for _, c in problems]).astype(np.int64)
        num, den, ok = interval_u_star(offsets, masks, counts, d, np.arange(len(problems)))
        assert ok.all()
        for (m, c), a, b in zip(problems, num, den):
            assert Fraction(int(a), int(b)) == brute_u_star(m.tolist(), c.tolist(), d)


def test_interval_windows_refuse_types_that_are_not_runs():
    offsets = np.array([0, 2, 3], dtype=np.int64)
    masks = np.array([0b0101, 0b0011, 0b1001], dtype=np.int64)     # 0101 is two runs on a 4-cycle; 1001 wraps
    counts = np.array([3, 2, 4], dtype=np.int64)
    num, den, ok = interval_u_star(offsets, masks, counts, 4, np.array([0, 1]))
    assert ok.tolist() == [False, True]
    assert Fraction(int(num[1]), int(den[1])) == 2                 # 4 sources on the two slots {3, 0}


def test_bfs_matches_networkx_and_rejects_foreign_nodes():
    topo = random_regular_digraph(30, 3, 5)
    dist = bfs_distances(np.array([0, 7], dtype=np.int64), topo.heads.reshape(30, 3).astype(np.int64))
    g = topo.graph()
    for row, src in zip(dist, (0, 7)):
        lengths = nx.single_source_shortest_path_length(g, src)
        assert row.tolist() == [lengths[x] for x in range(30)]
    with pytest.raises(TopologyError, match="outside"):
        topo.distances_from([30])


def test_circulant_eccentricities_are_diameters():
    rows = [(1, 5), (2, 3), (3, 9), (4, 6)]
    got = circulant_eccentricities(12, np.array(rows, dtype=np.int64))
    for (a, b), ecc in zip(rows, got):
        g = nx.DiGraph([(x, (x + s) % 12) for x in range(12) for s in (a, b)])
        expected = nx.diameter(g) if nx.is_strongly_connected(g) else 12
        assert ecc == expected


def test_subset_sums_and_min_cuts_equal_brute_force():
    rng = np.random.default_rng(3)
    d = 5
    problems = []
    for _ in range(25):
        k = int(rng.integers(1, 9))
        problems.append((rng.integers(1, 1 << d, size=k), rng.integers(1, 30, size=k)))
    offsets = np.cumsum([0] + [m.size for m, _ in problems]).astype(np.int64)
    masks = np.concatenate([m for m, _ in problems]).astype(np.int64)
    counts = np.concatenate([c for _, c in problems]).astype(np.int64)
    expected = [brute_u_star(m.tolist(), c.tolist(), d) for m, c in problems]
    for method in ("zeta", "cut"):
        num, den = bfb_price._exact_u_star(offsets, masks, counts, d, method)
        assert [Fraction(int(a), int(b)) for a, b in zip(num, den)] == expected, method
    floor = max(expected) - Fraction(1, 3)       # with a floor, min cuts return max(U*, floor)
    num, den = bfb_price._exact_u_star(offsets, masks, counts, d, "cut", floor)
    assert [Fraction(int(a), int(b)) for a, b in zip(num, den)] == [max(e, floor) for e in expected]


@pytest.mark.parametrize("d", [2, 3, 4, 5, 8, 16])
def test_generalized_kautz_from_its_formula_equals_the_built_graph(d):
    """The finder prices Pi_{d,m} from its arcs' formula, solving only receivers u <= m - 1 - u (x -> -x - 1
    is an automorphism): the same per-step maxima as the evaluator on the built graph and on its transpose,
    at sizes with and without self-loops, divisible by d or not."""
    rng = np.random.default_rng(d)
    sizes = {d + 1, d + 2, 2 * d + 3, d * (d + 1)} | set(rng.integers(d + 1, 400, size=6).tolist())
    for m in sorted(sizes):
        g = build(f"genkautz({d}, {m})")
        for transposed in (False, True):
            expected = bfb_price.bfb_step_maxima(g.transpose() if transposed else g)
            assert bfb_price.genkautz_step_maxima(d, m, transposed=transposed) == expected, (d, m, transposed)
