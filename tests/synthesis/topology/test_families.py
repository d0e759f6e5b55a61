"""Tests for the topology families, the expansion operators and the Topology type, built through
services.synthesis.topology.catalog.build (paper App. F / Table 9, section 5; digest sections 2 and 4)."""
from __future__ import annotations

import itertools
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from services.synthesis.topology.catalog import build
from services.synthesis.schedule.cost import moore_nodes
from services.synthesis.topology.distreg import CATALOGUE
from services.synthesis.topology.graph import Topology, TopologyError


def _arc_multiset(t: Topology) -> Counter:
    return Counter(zip(t.tails.tolist(), t.heads.tolist()))


def _nx_diameter(t: Topology) -> int:
    """Diameter computed independently of Topology.diameter (networkx BFS on the simple digraph)."""
    g = nx.DiGraph(t.graph())
    return max(max(nx.single_source_shortest_path_length(g, v).values()) for v in g)


def _check(t: Topology, *, nodes, degree, diameter=None, bidirectional=None, vertex_transitive=None,
           self_loops=None, multi_arcs=None):
    assert t.nodes == nodes
    assert t.degree == degree
    assert t.arcs == nodes * degree
    assert np.all(np.bincount(t.tails, minlength=nodes) == degree)
    assert np.all(np.bincount(t.heads, minlength=nodes) == degree)
    if diameter is not None:
        assert t.diameter == diameter
    if bidirectional is not None:
        assert t.bidirectional is bidirectional
    if vertex_transitive is not None:
        assert t.vertex_transitive is vertex_transitive
    if self_loops is not None:
        assert t.self_loops is self_loops
    if multi_arcs is not None:
        assert t.multi_arcs is multi_arcs


def _isomorphic(a: Topology, b: Topology) -> bool:
    return nx.is_isomorphic(a.graph(), b.graph())


# ----- base families ---------------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(2, 9))
def test_complete(n):
    t = build(f"complete({n})")
    _check(t, nodes=n, degree=n - 1, diameter=1, bidirectional=True, vertex_transitive=True,
           self_loops=False, multi_arcs=False)
    assert set(_arc_multiset(t)) == {(u, v) for u in range(n) for v in range(n) if u != v}
    assert t.expr == f"complete({n})"


@pytest.mark.parametrize("m", range(2, 7))
def test_bipartite_is_k_mm(m):
    t = build(f"bipartite({m})")
    _check(t, nodes=2 * m, degree=m, diameter=2, bidirectional=True, vertex_transitive=True,
           self_loops=False, multi_arcs=False)
    undirected = nx.Graph(t.graph())
    assert undirected.number_of_edges() == m * m
    assert nx.is_isomorphic(undirected, nx.complete_bipartite_graph(m, m))


@pytest.mark.parametrize("n,q", [(1, 2), (1, 5), (2, 2), (2, 3), (2, 4), (3, 2), (3, 3), (2, 5), (4, 2)])
def test_hamming(n, q):
    t = build(f"hamming({n}, {q})")
    _check(t, nodes=q ** n, degree=n * (q - 1), diameter=n, bidirectional=True, vertex_transitive=True,
           self_loops=False, multi_arcs=False)
    # arcs join exactly the words that differ in one coordinate (mixed-radix labels)
    words = list(itertools.product(range(q), repeat=n))
    expected = {(i, j) for i, a in enumerate(words) for j, b in enumerate(words)
                if sum(x != y for x, y in zip(a, b)) == 1}
    assert set(_arc_multiset(t)) == expected


@pytest.mark.parametrize("n", range(1, 7))
def test_hypercube(n):
    t = build(f"hypercube({n})")
    _check(t, nodes=2 ** n, degree=n, diameter=n, bidirectional=True, vertex_transitive=True,
           self_loops=False, multi_arcs=False)
    assert nx.is_isomorphic(nx.Graph(t.graph()), nx.hypercube_graph(n))
    assert np.array_equal(t.heads, build(f"hamming({n}, 2)").heads)


@pytest.mark.parametrize("dims", [(5,), (2, 2), (3, 4), (4, 6), (3, 5, 4), (3, 3, 2), (2, 7), (4, 4, 4),
                                  (3, 3, 3, 2), (2, 2, 2)])
def test_torus(dims):
    t = build(f"torus({', '.join(map(str, dims))})")
    # a size-2 dimension is one duplex link (K_2), every other dimension a bidirectional ring
    degree = sum(1 if s == 2 else 2 for s in dims)
    _check(t, nodes=math.prod(dims), degree=degree, diameter=sum(s // 2 for s in dims),
           bidirectional=True, vertex_transitive=True, self_loops=False, multi_arcs=False)
    factors = [nx.complete_graph(2) if s == 2 else nx.cycle_graph(s) for s in dims]
    reference = factors[0]
    for f in factors[1:]:
        reference = nx.cartesian_product(reference, f)
    assert nx.is_isomorphic(nx.Graph(t.graph()), reference)


def test_torus_332_has_one_duplex_link_in_the_size2_dimension():
    t = build("torus(3, 3, 2)")
    assert (t.nodes, t.degree) == (18, 5)
    assert not t.multi_arcs
    # node 0 = (0, 0, 0): its size-2 neighbour (0, 0, 1) = label 1 is joined by exactly one arc each way
    arcs = _arc_multiset(t)
    assert arcs[(0, 1)] == 1 and arcs[(1, 0)] == 1


@pytest.mark.parametrize("n", range(7, 61))
def test_circulant_default_offsets_theorem22(n):
    m = math.ceil((math.sqrt(2 * n - 1) - 1) / 2)
    t = build(f"circulant({n})")
    assert t.expr == f"circulant({n}, {m}, {m + 1})"
    _check(t, nodes=n, degree=4, diameter=m, bidirectional=True, vertex_transitive=True,
           self_loops=False, multi_arcs=False)
    assert set(_arc_multiset(t)) == {(x, (x + s) % n) for x in range(n) for s in (m, -m, m + 1, -(m + 1))}


@pytest.mark.parametrize("expr,nodes,degree,diameter,multi", [
    ("circulant(7, 2, 3)", 7, 4, 2, False),
    ("circulant(12, 2, 3)", 12, 4, 2, False),
    ("circulant(16, 3, 4)", 16, 4, 3, False),
    ("circulant(8, 1, 4)", 8, 3, 2, False),      # 2a = n: one duplex link, not two parallel arcs
    ("circulant(9, 1, 1)", 9, 4, 4, True),       # repeated offset: parallel links
    ("circulant(10, 1)", 10, 2, 5, False),
    ("circulant(11, 1, 2, 3)", 11, 6, 2, False),
])
def test_circulant_explicit_offsets(expr, nodes, degree, diameter, multi):
    t = build(expr)
    _check(t, nodes=nodes, degree=degree, diameter=diameter, bidirectional=True, vertex_transitive=True,
           self_loops=False, multi_arcs=multi)


@pytest.mark.parametrize("d", range(1, 7))
def test_dcirculant_base_has_diameter_2(d):
    t = build(f"dcirculant({d + 2}, {', '.join(str(a) for a in range(1, d + 1))})")
    _check(t, nodes=d + 2, degree=d, diameter=2, bidirectional=False, vertex_transitive=True,
           self_loops=False, multi_arcs=False)
    assert set(_arc_multiset(t)) == {(x, (x + a) % (d + 2)) for x in range(d + 2) for a in range(1, d + 1)}


@pytest.mark.parametrize("d", [2, 3, 4])
def test_genkautz_definition_and_self_loops(d):
    for m in range(d + 1, 41):
        t = build(f"genkautz({d}, {m})")
        expected = Counter((x, (-d * x - a) % m) for x in range(m) for a in range(1, d + 1))
        assert _arc_multiset(t) == expected, m
        _check(t, nodes=m, degree=d, vertex_transitive=False, multi_arcs=False)
        assert t.self_loops is (m % (d + 1) != 0), m
        # Theorem 21: D(Pi_{d,m}) = k implies m > M_{d,k-2}; and D <= ceil(log_d m) (Imase-Itoh)
        k = t.diameter
        assert k <= math.ceil(math.log(m, d) - 1e-9), m
        assert k < 2 or m > moore_nodes(d, k - 2), m


def test_genkautz_table4_diameters():
    assert build("genkautz(4, 1024)").diameter == 5
    assert build("genkautz(4, 64)").diameter == 3


@pytest.mark.parametrize("d", range(2, 6))
def test_genkautz_d_plus_1_is_complete(d):
    g = build(f"genkautz({d}, {d + 1})")
    assert not g.self_loops
    assert _isomorphic(g, build(f"complete({d + 1})"))
    assert _arc_multiset(g) == _arc_multiset(build(f"complete({d + 1})"))


@pytest.mark.parametrize("d,n", [(2, 0), (2, 1), (2, 2), (2, 3), (3, 1), (3, 2), (4, 1)])
def test_kautz(d, n):
    t = build(f"kautz({d}, {n})")
    _check(t, nodes=d ** n * (d + 1), degree=d, diameter=n + 1, self_loops=False, multi_arcs=False)
    assert t.expr == f"kautz({d}, {n})"
    line_expr = f"complete({d + 1})" if n == 0 else f"line(complete({d + 1}), {n})"
    assert _isomorphic(t, build(line_expr))


@pytest.mark.parametrize("d,n", [(2, 1), (2, 2), (2, 3), (2, 5), (3, 1), (3, 2), (3, 3), (4, 2), (4, 4)])
def test_debruijn(d, n):
    t = build(f"debruijn({d}, {n})")
    _check(t, nodes=d ** n, degree=d, diameter=n, self_loops=True, multi_arcs=False)
    arcs = _arc_multiset(t)
    assert arcs[(0, 0)] == 1 and arcs[(d ** n - 1, d ** n - 1)] == 1
    assert set(arcs) == {(x, (d * x + a) % d ** n) for x in range(d ** n) for a in range(d)}


@pytest.mark.parametrize("d,n", [(2, 2), (2, 3), (3, 2)])
def test_debruijn_is_iterated_line_graph(d, n):
    assert _isomorphic(build(f"debruijn({d}, {n})"), build(f"line(debruijn({d}, 1), {n - 1})"))


@pytest.mark.parametrize("n,d", [(2, 1), (3, 1), (5, 1), (8, 1), (4, 2), (5, 3), (6, 4)])
def test_ring(n, d):
    t = build(f"ring({n}, {d})")
    _check(t, nodes=n, degree=d, diameter=n - 1, vertex_transitive=True, self_loops=False,
           multi_arcs=d > 1, bidirectional=(n == 2))
    assert _arc_multiset(t) == Counter({(x, (x + 1) % n): d for x in range(n)})
    assert t.expr == (f"ring({n})" if d == 1 else f"ring({n}, {d})")


@pytest.mark.parametrize("n,d", [(3, 2), (4, 2), (7, 2), (8, 2), (5, 4), (6, 6), (9, 4)])
def test_biring(n, d):
    t = build(f"biring({n}, {d})")
    _check(t, nodes=n, degree=d, diameter=n // 2, bidirectional=True, vertex_transitive=True,
           self_loops=False, multi_arcs=d > 2)
    assert _arc_multiset(t) == Counter({**{(x, (x + 1) % n): d // 2 for x in range(n)},
                                        **{(x, (x - 1) % n): d // 2 for x in range(n)}})


@pytest.mark.parametrize("expr,nodes,diameter", [
    ("twisted_torus(4, 2)", 8, 2),
    ("twisted_torus(6, 3)", 18, 3),
    ("twisted_torus(8, 4)", 32, 4),
    ("twisted_torus(12, 6)", 72, 6),
    ("twisted_torus(4, 4)", 16, None),
    ("twisted_torus(5, 3, 1)", 15, None),
    ("twisted_torus(6, 4, 3)", 24, None),
    ("twisted_torus(7, 5, 0)", 35, 5),
])
def test_twisted_torus(expr, nodes, diameter):
    t = build(expr)
    _check(t, nodes=nodes, degree=4, diameter=diameter, bidirectional=True, vertex_transitive=True,
           self_loops=False, multi_arcs=False)
    assert t.translation is not None
    assert t.diameter == _nx_diameter(t)


def test_twisted_torus_canonical_shift_and_untwisted_case():
    assert build("twisted_torus(8, 4, 4)").expr == "twisted_torus(8, 4)"       # default shift a // 2
    assert build("twisted_torus(8, 4, 1)").expr == "twisted_torus(8, 4, 1)"
    assert _isomorphic(build("twisted_torus(5, 4, 0)"), build("torus(5, 4)"))
    # the rectangular twisted torus RTT(2b, b) has a smaller diameter than the plain 2b x b torus
    assert build("twisted_torus(12, 6)").diameter < build("torus(12, 6)").diameter


# (N, diameter) from Table 8: every catalogued graph is 4-regular and undirected
TABLE8 = {
    "octahedron": (6, 2), "paley9": (9, 2), "k55_minus_matching": (10, 3), "heawood_distance3": (14, 3),
    "petersen_line": (15, 3), "hypercube4": (16, 4), "heawood_line": (21, 3), "pg23_incidence": (26, 3),
    "ag24_minus_parallel_class": (32, 4), "odd4": (35, 3), "tutte8cage_line": (45, 4),
    "doubled_odd4": (70, 7), "gq33_incidence": (80, 4), "tutte12cage_line": (189, 6),
    "gh33_incidence": (728, 6),
}


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_distreg_builds(name):
    t = build(f"distreg({name})")
    nodes, diameter = TABLE8[name]
    _check(t, nodes=nodes, degree=4, diameter=diameter, bidirectional=True, self_loops=False,
           multi_arcs=False)
    assert t.expr == f"distreg({name})"


def test_distreg_small_members_match_named_graphs():
    assert _isomorphic(build("distreg(paley9)"), build("hamming(2, 3)"))
    assert _isomorphic(build("distreg(hypercube4)"), build("hypercube(4)"))


def test_edges_family():
    t = build("edges(3, 0>1, 1>2, 2>0)")
    _check(t, nodes=3, degree=1, diameter=2, bidirectional=False, self_loops=False, multi_arcs=False)
    assert t.expr == "edges(3, 0>1, 1>2, 2>0)"
    t2 = build("edges(2, 0>1, 0>1, 1>0, 1>0)")
    _check(t2, nodes=2, degree=2, diameter=1, bidirectional=True, multi_arcs=True)


# ----- translations are automorphisms ------------------------------------------------------------------

TRANSLATED = [
    "complete(6)", "bipartite(4)", "ring(5)", "ring(4, 3)", "biring(7)", "biring(6, 4)",
    "circulant(13)", "circulant(8, 1, 4)", "circulant(9, 1, 1)", "circulant(12, 1, 5)",
    "dcirculant(6, 1, 2, 3, 4)", "dcirculant(7, 2, 3)", "hamming(2, 4)", "hamming(3, 3)", "hypercube(4)",
    "torus(3, 4)", "torus(3, 3, 2)", "torus(2, 5, 3)", "torus(4, 2, 2)",
    "twisted_torus(8, 4)", "twisted_torus(6, 3)", "twisted_torus(4, 4)", "twisted_torus(5, 3, 1)",
    "twisted_torus(7, 4, 3)", "twisted_torus(4, 2)", "twisted_torus(3, 5, 2)",
    "product(complete(3), ring(4))", "product(ring(3), biring(5), hypercube(2))", "power(circulant(7), 2)",
    "power(dcirculant(4, 1, 2), 2)",
]


def _assert_translation_is_automorphism(t: Topology) -> None:
    tr = t.translation
    assert tr.size == t.nodes
    n = t.nodes
    x = np.arange(n)
    base = np.sort(t.tails.astype(np.int64) * n + t.heads)
    for u in range(n):
        f = tr.add(x, np.full(n, u))
        assert np.array_equal(np.sort(f), x), (t.expr, u)             # a permutation of the nodes
        moved = np.sort(f[t.tails].astype(np.int64) * n + f[t.heads])
        assert np.array_equal(moved, base), (t.expr, u)              # maps the arc multiset onto itself
        if u == 0:
            assert np.array_equal(f, x)                               # 0 is the identity element
    for u in range(n):
        assert tr.add(np.array([u]), np.array([tr.negate(u)]))[0] == 0


@pytest.mark.parametrize("expr", TRANSLATED)
def test_translation_is_an_automorphism_for_every_node(expr):
    t = build(expr)
    assert t.translation is not None
    assert t.vertex_transitive
    _assert_translation_is_automorphism(t)
    tt = t.transpose()                                                # still an automorphism of G^T
    if tt.translation is not None:
        _assert_translation_is_automorphism(tt)


@pytest.mark.parametrize("expr", ["product(twisted_torus(4, 2), ring(3))", "product(twisted_torus(6, 3), complete(2))",
                                  "power(twisted_torus(4, 2), 2)", "product(kautz(2, 1), ring(3))",
                                  "line(complete(4))", "degree(ring(4), 2)", "distreg(odd4)"])
def test_translation_if_present_is_an_automorphism(expr):
    """A translation, where the construction keeps one, is an automorphism; with or without it the distance
    facts (read through the translation from node 0 when there is one, off the distance matrix otherwise) are
    the graph's, by breadth-first search in networkx."""
    t = build(expr)
    if t.translation is not None:
        _assert_translation_is_automorphism(t)
    g = nx.DiGraph(zip(t.tails.tolist(), t.heads.tolist()))
    counts = np.bincount([d for _, row in nx.all_pairs_shortest_path_length(g) for d in row.values()])
    counts[0] = 0                                                     # ordered pairs v != u only
    assert t.distance_counts.tolist() == counts.tolist(), expr


# self-loops at some nodes but not at others: these cannot be vertex-transitive
@pytest.mark.parametrize("expr", ["genkautz(2, 7)", "genkautz(3, 10)", "debruijn(2, 3)", "debruijn(3, 2)",
                                  "product(genkautz(2, 7), ring(3))", "line(debruijn(2, 2))"])
def test_non_vertex_transitive_families_have_no_translation(expr):
    t = build(expr)
    loops = np.bincount(t.tails[t.tails == t.heads], minlength=t.nodes)
    assert loops.min() == 0 < loops.max()
    assert t.translation is None
    assert not t.vertex_transitive


# ----- invalid parameters --------------------------------------------------------------------------------

INVALID = [
    ("complete(1)", r"complete.*at least 2"),
    ("bipartite(0)", r"bipartite.*at least 1"),
    ("biring(5, 3)", r"biring.*even"),
    ("biring(2)", r"biring.*at least 3"),
    ("ring(1)", r"ring.*at least 2"),
    ("circulant(8, 2)", r"gcd.*disconnected"),
    ("circulant(8, 2, 4, 6)", r"gcd.*disconnected"),
    ("circulant(8, 9)", r"offset 9 must be below n = 8"),
    ("circulant(8, 0)", r"offset must be at least 1"),
    ("circulant(5)", r"Theorem 22.*n > 6"),
    ("dcirculant(6)", r"at least one offset"),
    ("dcirculant(6, 2, 4)", r"not strongly connected"),
    ("genkautz(4, 3)", r"genkautz.*at least 5"),
    ("genkautz(1, 5)", r"not strongly connected"),
    ("kautz(1, 2)", r"kautz.*at least 2"),
    ("torus()", r"torus.*at least one dimension"),
    ("torus(1, 4)", r"torus.*dimension must be at least 2"),
    ("twisted_torus(4, 4, 4)", r"shift must be below"),
    ("hypercube(0)", r"hypercube.*at least 1"),
    ("hamming(2, 1)", r"hamming.*at least 2"),
    ("debruijn(1, 3)", r"debruijn.*at least 2"),
    ("nosuchfamily(3)", r"unknown topology 'nosuchfamily'.*complete"),
    ("complete(3, 4)", r"complete: wrong number of arguments; usage: complete\(n"),
    ("hamming(3)", r"hamming: wrong number of arguments"),
    ("genkautz(2, 5, 1)", r"genkautz: wrong number of arguments"),
    ("line(3)", r"line: the first argument must be a topology"),
    ("degree(2, 2)", r"degree: the first argument must be a topology"),
    ("power(3, 2)", r"power: the first argument must be a topology"),
    ("complete(complete(3))", r"complete: arguments are numbers, not topologies"),
    ("torus(3, ring(3))", r"torus: arguments are numbers, not topologies"),
    ("power(complete(3), complete(2))", r"power: the exponent must be an integer"),
    ("line(complete(3), 0)", r"line: the repeat count must be a positive integer"),
    ("line(complete(3), complete(2))", r"line: the repeat count"),
    ("degree(complete(3), 1)", r"degree: the expansion factor"),
    ("degree(debruijn(2, 2), 2)", r"degree: .*self-loops"),
    ("degree(genkautz(2, 4), 3)", r"degree: .*self-loops"),
    ("product(complete(3))", r"product: needs at least two topologies"),
    ("product(complete(3), 2)", r"product: needs at least two topologies"),
    ("complete(x)", r"complete: n must be an integer, got 'x'"),
    ("complete(0>1)", r"complete: n must be an integer"),
    ("distreg(5)", r"distreg: expects a graph name"),
    ("distreg(nosuchgraph)", r"nosuchgraph"),
    ("hypercube(40)", r"hypercube: \d+ nodes exceeds the limit"),
    ("hamming(20, 4)", r"hamming: \d+ nodes exceeds the limit"),
    ("debruijn(4, 20)", r"debruijn: \d+ nodes exceeds the limit"),
    ("kautz(4, 10)", r"kautz: \d+ nodes exceeds the limit"),
    ("torus(300, 300)", r"torus: 90000 nodes exceeds the limit"),
    ("complete(70000)", r"complete: 70000 nodes exceeds the limit"),
    ("power(complete(10), 8)", r"power: 100000000 nodes exceeds the limit"),
    ("edges(3)", r"edges: needs at least one arc"),
    ("edges(3, 0>1, 1>2)", r"not strongly connected"),
    ("edges(4, 0>1, 1>0, 2>3, 3>2)", r"not strongly connected \(2 strong components\)"),
    ("edges(3, 0>1, 1>2, 2>3)", r"outside 0..2"),
    ("edges(3, 0, 1)", r"edges: arcs are written tail>head"),
]


@pytest.mark.parametrize("expr,message", INVALID)
def test_invalid_parameters_raise_topology_error(expr, message):
    with pytest.raises(TopologyError, match=message) as info:
        build(expr)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("expr", ["hypercube(100000)", "hamming(100000, 2)", "debruijn(2, 100000)"])
def test_absurdly_large_sizes_give_topology_error(expr):
    with pytest.raises(TopologyError, match="exceeds the limit"):
        build(expr)


_PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from services.synthesis.topology.catalog import build
try:
    build(sys.argv[1])
except Exception as exc:
    print(type(exc).__name__)
else:
    print("built")
"""


@pytest.mark.parametrize("expr", ["complete(65536)", "ring(2, 1000000000)"])
def test_absurd_arc_counts_give_topology_error(expr):
    # run in a child with a 2 GiB address-space limit so the bug cannot exhaust this machine's memory
    out = subprocess.run([sys.executable, "-c", _PROBE, expr], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "TopologyError", out.stdout + out.stderr


# ----- expansion operators ---------------------------------------------------------------------------------

@pytest.mark.parametrize("base,diameter", [("bipartite(2)", 2), ("complete(5)", 1), ("line(complete(5))", 2),
                                           ("genkautz(3, 7)", None), ("hamming(2, 3)", 2),
                                           ("ring(3, 2)", 2), ("debruijn(2, 2)", 2)])
def test_line_graph(base, diameter):
    g = build(base)
    if diameter is not None:
        assert g.diameter == diameter
    lg = build(f"line({base})")
    _check(lg, nodes=g.nodes * g.degree, degree=g.degree, diameter=g.diameter + 1, self_loops=g.self_loops)
    # node i of L(G) is arc i of G; arc e -> f iff head(e) == tail(f)
    expected = Counter((e, f) for e in range(g.arcs) for f in range(g.arcs) if g.heads[e] == g.tails[f])
    assert _arc_multiset(lg) == expected
    assert lg.expr == f"line({base})"


def test_line_graph_sizes_from_paper():
    _check(build("line(bipartite(2))"), nodes=8, degree=2, diameter=3)             # Fig. 2
    _check(build("line(complete(5))"), nodes=20, degree=4, diameter=2)
    _check(build("line(line(complete(5)))"), nodes=80, degree=4, diameter=3)
    _check(build("line(complete(5), 2)"), nodes=80, degree=4, diameter=3)
    _check(build("line(circulant(16, 3, 4), 2)"), nodes=256, degree=4, diameter=5)
    assert not build("line(complete(5))").bidirectional       # the line graph of a bidirectional graph


def test_line_repeated_equals_nested():
    a, b = build("line(complete(4), 2)"), build("line(line(complete(4)))")
    assert np.array_equal(a.tails, b.tails) and np.array_equal(a.heads, b.heads)
    assert a.expr == "line(complete(4), 2)"


def test_line_of_directed_cycle_is_the_cycle():
    t = build("line(ring(6))")
    _check(t, nodes=6, degree=1, diameter=5)
    assert _isomorphic(t, build("ring(6)"))


@pytest.mark.parametrize("base,n,diameter", [("ring(4)", 2, 4), ("biring(5)", 2, 2), ("complete(3)", 3, 2),
                                             ("bipartite(2)", 2, 2), ("genkautz(2, 6)", 2, None)])
def test_degree_expansion(base, n, diameter):
    g = build(base)
    t = build(f"degree({base}, {n})")
    _check(t, nodes=n * g.nodes, degree=n * g.degree, diameter=diameter)
    expected = Counter()
    for (u, v), k in _arc_multiset(g).items():
        for i in range(n):
            for j in range(n):
                expected[(u * n + i, v * n + j)] += k
    assert _arc_multiset(t) == expected
    assert t.diameter == _nx_diameter(t)


@pytest.mark.parametrize("a,b", [("ring(3)", "ring(4)"), ("complete(3)", "genkautz(2, 5)"),
                                 ("kautz(2, 1)", "biring(5)"), ("bipartite(3)", "debruijn(2, 2)"),
                                 ("line(complete(3))", "circulant(7)")])
def test_product(a, b):
    g1, g2 = build(a), build(b)
    t = build(f"product({a}, {b})")
    _check(t, nodes=g1.nodes * g2.nodes, degree=g1.degree + g2.degree, diameter=g1.diameter + g2.diameter)
    expected = Counter()
    for (u, v), k in _arc_multiset(g1).items():
        for z in range(g2.nodes):
            expected[(u * g2.nodes + z, v * g2.nodes + z)] += k
    for (u, v), k in _arc_multiset(g2).items():
        for y in range(g1.nodes):
            expected[(y * g2.nodes + u, y * g2.nodes + v)] += k
    assert _arc_multiset(t) == expected
    assert t.expr == f"product({g1.expr}, {g2.expr})"


def test_product_of_three_and_power_sizes():
    t = build("product(ring(3), biring(4), complete(3))")
    _check(t, nodes=36, degree=5, diameter=2 + 2 + 1)
    p = build("power(circulant(7), 3)")
    _check(p, nodes=343, degree=12, diameter=6, bidirectional=True)
    r = build("power(ring(3), 2)")
    _check(r, nodes=9, degree=2, diameter=4, bidirectional=False)


@pytest.mark.parametrize("n,q", [(2, 2), (2, 3), (3, 2), (2, 4), (3, 3)])
def test_power_of_complete_is_hamming(n, q):
    p, h = build(f"power(complete({q}), {n})"), build(f"hamming({n}, {q})")
    assert p.expr == f"power(complete({q}), {n})"
    assert _isomorphic(p, h)
    assert np.array_equal(p.tails, h.tails) and np.array_equal(p.heads, h.heads)   # same labelling


# ----- Topology methods ------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr", ["genkautz(2, 7)", "ring(5, 2)", "dcirculant(6, 1, 2, 3, 4)", "debruijn(2, 3)",
                                  "line(complete(4))", "edges(3, 0>1, 1>2, 2>0)"])
def test_transpose_reverses_arcs(expr):
    t = build(expr)
    tt = t.transpose()
    assert _arc_multiset(tt) == Counter({(h, u): k for (u, h), k in _arc_multiset(t).items()})
    assert (tt.nodes, tt.degree) == (t.nodes, t.degree)
    assert tt.self_loops == t.self_loops and tt.multi_arcs == t.multi_arcs
    back = tt.transpose()
    assert _arc_multiset(back) == _arc_multiset(t)
    if t.translation is not None:
        assert tt.translation is t.translation


def test_transpose_of_bidirectional_topology_has_the_same_arcs():
    t = build("circulant(9)")
    assert _arc_multiset(t.transpose()) == _arc_multiset(t)


def test_bidirectional_is_computed_from_arcs():
    assert build("edges(2, 0>1, 1>0)").bidirectional
    assert not build("edges(3, 0>1, 1>2, 2>0)").bidirectional
    assert build("edges(3, 0>1, 1>0, 1>2, 2>1, 2>0, 0>2)").bidirectional
    # same simple pairs, unequal multiplicities (0>1 twice, 1>0 once): not bidirectional
    assert not build("edges(3, 0>1, 0>1, 1>0, 1>2, 2>0, 2>2)").bidirectional


def test_arc_index_and_lanes():
    t = build("ring(3, 2)")
    assert t.lanes.tolist() == [0, 1, 0, 1, 0, 1]
    idx = t.arc_index([0, 0, 1, 2, 2], [1, 1, 2, 0, 0], [0, 1, 1, 0, 1])
    assert idx.tolist() == [0, 1, 3, 4, 5]
    assert np.all(t.tails[idx] == [0, 0, 1, 2, 2]) and np.all(t.heads[idx] == [1, 1, 2, 0, 0])
    # missing arcs: wrong direction, lane beyond the multiplicity, negative lane, self-loop
    assert t.arc_index([1, 0, 0, 0, 0], [0, 1, 1, 0, 2], [0, 2, -1, 0, 0]).tolist() == [-1, -1, -1, -1, -1]
    c = build("complete(4)")
    assert c.arc_index([2], [2], [0]).tolist() == [-1]
    assert c.arc_index([3], [0], [1]).tolist() == [-1]          # lane 1 does not exist in a simple graph
    every = c.arc_index(c.tails, c.heads, c.lanes)
    assert every.tolist() == list(range(c.arcs))


def test_arc_index_out_of_range_node_is_missing():
    t = build("complete(3)")
    assert t.arc_index([0, 2, -1], [3, 3, 1], [0, 0, 0]).tolist() == [-1, -1, -1]


def test_graph_is_a_multidigraph_with_every_arc():
    t = build("ring(4, 2)")
    g = t.graph()
    assert isinstance(g, nx.MultiDiGraph)
    assert g.number_of_nodes() == 4 and g.number_of_edges() == 8
    assert g.number_of_edges(0, 1) == 2 and g.number_of_edges(1, 0) == 0
    assert g.graph["expr"] == "ring(4, 2)"


def test_distances_and_info():
    t = build("ring(5)")
    assert t.distances_from([0]).tolist() == [[0, 1, 2, 3, 4]]
    assert t.distances_to([0]).tolist() == [[0, 4, 3, 2, 1]]
    assert t.distance_matrix[2, 1] == 4
    assert t.info() == {"expr": "ring(5)", "nodes": 5, "degree": 1, "regular": True, "bidirectional": False,
                        "vertex_transitive": True, "self_loops": False, "multi_arcs": False}


@pytest.mark.parametrize("expr", ["genkautz(3, 10)", "kautz(2, 2)", "debruijn(2, 4)", "line(bipartite(3))",
                                  "degree(ring(5), 2)", "twisted_torus(6, 4, 1)", "product(ring(3), ring(4))"])
def test_diameter_matches_networkx(expr):
    t = build(expr)
    assert t.diameter == _nx_diameter(t)


@pytest.mark.parametrize("expr,canonical", [
    ("ring(5, 1)", "ring(5)"), ("biring(6, 2)", "biring(6)"), ("twisted_torus(8, 4, 4)", "twisted_torus(8, 4)"),
    ("line(complete(3), 1)", "line(complete(3))"), ("circulant(13)", "circulant(13, 2, 3)"),
    ("power(circulant(7), 2)", "power(circulant(7, 2, 3), 2)"), ("edges(3, 0 > 1, 1>2,2>0)", "edges(3, 0>1, 1>2, 2>0)"),
    ("product( ring(3), product(ring(3), ring(2)) )", "product(ring(3), product(ring(3), ring(2)))"),
    ("kautz(2, 0)", "kautz(2, 0)"), ("distreg( odd4 )", "distreg(odd4)"),
])
def test_expr_is_canonical_and_rebuilds_the_same_topology(expr, canonical):
    t = build(expr)
    assert t.expr == canonical
    again = build(t.expr)
    assert again.expr == canonical
    assert np.array_equal(again.tails, t.tails) and np.array_equal(again.heads, t.heads)
