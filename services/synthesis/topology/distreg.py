"""Catalogue of the valency-4 distance-regular graphs of Table 8 in
"Efficient Direct-Connect Topologies for Collective Communications" (NSDI'25).

Every graph is constructed from first principles (finite-field arithmetic,
set systems, LCF notation or networkx generators); no adjacency list is
hard-coded.  Each builder returns an undirected simple :class:`networkx.Graph`
whose nodes are relabelled ``0..N-1`` following the sorted order of the
natural labels of the construction, so the result is deterministic.

Reference for the intersection arrays and constructions:
A. E. Brouwer, A. M. Cohen, A. Neumaier, *Distance-Regular Graphs*,
Springer 1989 (BCN), and H. Van Maldeghem, *Generalized Polygons*,
Birkhäuser 1998.

Only networkx, numpy and the standard library are used.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Sequence

import networkx as nx
import numpy as np

__all__ = ["CATALOGUE", "DistRegEntry", "distreg_graph"]


@dataclass(frozen=True)
class DistRegEntry:
    """One distance-regular graph of the catalogue."""

    name: str  # canonical key, lowercase snake case, e.g. "odd4"
    title: str  # human readable title, e.g. "Odd graph O4"
    nodes: int
    degree: int
    diameter: int
    build: Callable[[], nx.Graph]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _relabel(G: nx.Graph) -> nx.Graph:
    """Return a fresh simple undirected graph with nodes 0..N-1.

    Node ``i`` is the ``i``-th node of ``sorted(G.nodes)``; edges are added in
    sorted order so the result does not depend on insertion order.
    """
    order = sorted(G.nodes)
    index = {v: i for i, v in enumerate(order)}
    H = nx.Graph()
    H.add_nodes_from(range(len(order)))
    H.add_edges_from(
        sorted(tuple(sorted((index[u], index[v]))) for u, v in G.edges() if u != v)
    )
    return H


def _line_graph(G: nx.Graph) -> nx.Graph:
    """Line graph of ``G`` with nodes labelled by sorted edge tuples."""
    L = nx.Graph()
    edges = [tuple(sorted(e)) for e in G.edges()]
    L.add_nodes_from(edges)
    for v in G.nodes:
        inc = sorted(tuple(sorted((v, w))) for w in G[v])
        L.add_edges_from(itertools.combinations(inc, 2))
    return L


def _incidence_graph(
    points: Iterable[Hashable], blocks: Iterable[Iterable[int]]
) -> nx.Graph:
    """Point/block incidence (Levi) graph; points are ``(0, p)``, blocks ``(1, b)``."""
    G = nx.Graph()
    G.add_nodes_from((0, p) for p in points)
    for b in blocks:
        bt = tuple(sorted(b))
        G.add_node((1, bt))
        G.add_edges_from(((0, p), (1, bt)) for p in bt)
    return G


def _projective_points(dim: int, p: int) -> list[tuple[int, ...]]:
    """Points of PG(dim-1, p) (p prime) as normalised vectors of GF(p)^dim:
    the first non-zero coordinate is 1."""
    pts = []
    for v in itertools.product(range(p), repeat=dim):
        nz = [x for x in v if x]
        if nz and nz[0] == 1:
            pts.append(v)
    return pts


def _normalise(v: Sequence[int], p: int) -> tuple[int, ...]:
    """Normalise a non-zero vector over GF(p) (first non-zero entry = 1)."""
    for x in v:
        if x % p:
            inv = pow(int(x), p - 2, p)
            return tuple(int(y) * inv % p for y in v)
    raise ValueError("zero vector has no projective point")


def _span_points(x: Sequence[int], y: Sequence[int], p: int) -> frozenset:
    """Projective points of the line spanned by points ``x`` and ``y`` over GF(p)."""
    pts = {_normalise(x, p)}
    for a in range(p):
        pts.add(_normalise([(a * xi + yi) % p for xi, yi in zip(x, y)], p))
    return frozenset(pts)


def _lcf_graph(n: int, shifts: Sequence[int], repeats: int) -> nx.Graph:
    return nx.Graph(nx.LCF_graph(n, list(shifts), repeats))


# ---------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------


def _build_octahedron() -> nx.Graph:
    """Octahedron K_{2,2,2} = Johnson graph J(4,2): 2-subsets of {0..3},
    adjacent iff they share exactly one element.  Intersection array {4,1;1,4}."""
    G = nx.Graph()
    subsets = list(itertools.combinations(range(4), 2))
    G.add_nodes_from(subsets)
    G.add_edges_from(
        (a, b) for a, b in itertools.combinations(subsets, 2) if len(set(a) & set(b)) == 1
    )
    return _relabel(G)


def _build_paley9() -> nx.Graph:
    """Paley graph P9 over GF(9) = GF(3)[i]/(i^2 + 1): x ~ y iff x - y is a
    non-zero square.  (nx.paley_graph only handles prime orders and returns a
    DiGraph, so GF(9) is implemented here.)  P9 is isomorphic to the Hamming
    graph H(2,3) = K3 x K3; intersection array {4,2;1,2}."""
    p = 3
    elems = [(a, b) for a in range(p) for b in range(p)]  # a + b*i

    def mul(x, y):
        (a, b), (c, d) = x, y
        return ((a * c - b * d) % p, (a * d + b * c) % p)

    squares = {mul(z, z) for z in elems if z != (0, 0)}
    G = nx.Graph()
    G.add_nodes_from(elems)
    for x, y in itertools.combinations(elems, 2):
        diff = ((x[0] - y[0]) % p, (x[1] - y[1]) % p)
        if diff in squares:  # -1 is a square in GF(9), so this is symmetric
            G.add_edge(x, y)
    return _relabel(G)


def _build_k55_minus_matching() -> nx.Graph:
    """K_{5,5} minus a perfect matching: (0,i) ~ (1,j) iff i != j.
    Intersection array {4,3,1;1,3,4}."""
    G = nx.Graph()
    G.add_nodes_from((s, i) for s in range(2) for i in range(5))
    G.add_edges_from(((0, i), (1, j)) for i in range(5) for j in range(5) if i != j)
    return _relabel(G)


def _heawood() -> nx.Graph:
    """Heawood graph, LCF [5,-5]^7 (incidence graph of the Fano plane)."""
    return _lcf_graph(14, [5, -5], 7)


def _build_heawood_distance3() -> nx.Graph:
    """Distance-3 graph of the Heawood graph (vertices at distance 3 adjacent);
    the bipartite complement of the Fano incidence graph.
    Intersection array {4,3,2;1,2,4}."""
    H = _heawood()
    dist = dict(nx.all_pairs_shortest_path_length(H))
    G = nx.Graph()
    G.add_nodes_from(H.nodes)
    G.add_edges_from(
        (u, v) for u, v in itertools.combinations(sorted(H.nodes), 2) if dist[u][v] == 3
    )
    return _relabel(G)


def _build_petersen_line() -> nx.Graph:
    """Line graph of the Petersen graph.  Intersection array {4,2,1;1,1,4}."""
    return _relabel(_line_graph(nx.petersen_graph()))


def _build_hypercube4() -> nx.Graph:
    """4-dimensional hypercube Q4 = H(4,2).  Intersection array {4,3,2,1;1,2,3,4}."""
    return _relabel(nx.hypercube_graph(4))


def _build_heawood_line() -> nx.Graph:
    """Line graph of the Heawood graph (flag graph of the Fano plane).
    Intersection array {4,2,2;1,1,2}."""
    return _relabel(_line_graph(_heawood()))


def _build_pg23_incidence() -> nx.Graph:
    """Incidence graph of the projective plane PG(2,3): points and lines are the
    13 one-dimensional subspaces of GF(3)^3 (lines given by their normal
    vectors); point x lies on line l iff x . l = 0.
    Intersection array {4,3,3;1,1,4}."""
    p = 3
    pts = _projective_points(3, p)
    lines = [
        [x for x in pts if sum(a * b for a, b in zip(x, l)) % p == 0] for l in pts
    ]
    return _relabel(_incidence_graph(pts, lines))


# GF(4) = GF(2)[w]/(w^2 + w + 1), elements encoded as integers 0..3 (bit i =
# coefficient of w^i); addition is XOR.
def _gf4_mul(a: int, b: int) -> int:
    r = 0
    for i in range(2):
        if (b >> i) & 1:
            r ^= a << i
    if r & 0b100:
        r ^= 0b111  # reduce modulo w^2 + w + 1
    return r


def _build_ag24_minus_parallel_class() -> nx.Graph:
    """Incidence graph of the affine plane AG(2,4) with one parallel class (the
    vertical lines x = c) removed: 16 points of GF(4)^2 and the 16 lines
    y = m*x + c (m, c in GF(4)).  Equivalently a 4-fold cover of K_{4,4}.
    Intersection array {4,3,3,1;1,1,3,4}."""
    F = range(4)
    pts = [(x, y) for x in F for y in F]
    lines = [
        [(x, _gf4_mul(m, x) ^ c) for x in F] for m in F for c in F
    ]
    return _relabel(_incidence_graph(pts, lines))


def _build_odd4() -> nx.Graph:
    """Odd graph O4 = Kneser graph K(7,3): 3-subsets of a 7-set, adjacent iff
    disjoint.  Intersection array {4,3,3;1,1,2}."""
    subsets = list(itertools.combinations(range(7), 3))
    G = nx.Graph()
    G.add_nodes_from(subsets)
    G.add_edges_from(
        (a, b) for a, b in itertools.combinations(subsets, 2) if not set(a) & set(b)
    )
    return _relabel(G)


def _tutte8cage() -> nx.Graph:
    """Tutte's 8-cage (Tutte-Coxeter graph), LCF [-13,-9,7,-7,9,13]^5."""
    return _lcf_graph(30, [-13, -9, 7, -7, 9, 13], 5)


def _build_tutte8cage_line() -> nx.Graph:
    """Line graph of Tutte's 8-cage (the generalized quadrangle GQ(2,2)
    incidence graph).  Intersection array {4,2,2,2;1,1,1,2}."""
    return _relabel(_line_graph(_tutte8cage()))


def _build_doubled_odd4() -> nx.Graph:
    """Doubled Odd graph 2.O4: 3- and 4-subsets of a 7-set, adjacent iff one
    contains the other (middle layers of the Boolean lattice B7).
    Intersection array {4,3,3,2,2,1,1;1,1,2,2,3,3,4}."""
    G = nx.Graph()
    threes = list(itertools.combinations(range(7), 3))
    fours = list(itertools.combinations(range(7), 4))
    G.add_nodes_from((3, s) for s in threes)
    G.add_nodes_from((4, s) for s in fours)
    for f in fours:
        for t in itertools.combinations(f, 3):
            G.add_edge((3, t), (4, f))
    return _relabel(G)


def _build_gq33_incidence() -> nx.Graph:
    """Incidence graph of the generalized quadrangle GQ(3,3) = W(3): the 40
    points of PG(3,3) and the 40 lines totally isotropic for the symplectic form
    f(x,y) = x0*y1 - x1*y0 + x2*y3 - x3*y2.
    Intersection array {4,3,3,3;1,1,1,4}."""
    p = 3
    pts = _projective_points(4, p)

    def f(x, y):
        return (x[0] * y[1] - x[1] * y[0] + x[2] * y[3] - x[3] * y[2]) % p

    lines = {
        _span_points(x, y, p)
        for x, y in itertools.combinations(pts, 2)
        if f(x, y) == 0
    }
    return _relabel(_incidence_graph(pts, lines))


def _tutte12cage() -> nx.Graph:
    """Tutte's 12-cage (126 vertices, cubic, girth 12), LCF
    [17,27,-13,-59,-35,35,-11,13,-53,53,-27,21,57,11,-21,-57,59,-17]^7.
    It is the incidence graph of the generalized hexagon GH(2,2)."""
    G = _lcf_graph(
        126,
        [17, 27, -13, -59, -35, 35, -11, 13, -53, 53, -27, 21, 57, 11, -21, -57, 59, -17],
        7,
    )
    if nx.girth(G) != 12:  # pragma: no cover - guards a transcription error
        raise RuntimeError("Tutte 12-cage LCF construction does not have girth 12")
    return G


def _build_tutte12cage_line() -> nx.Graph:
    """Line graph of Tutte's 12-cage (flag graph of GH(2,2)).
    Intersection array {4,2,2,2,2,2;1,1,1,1,1,2}."""
    return _relabel(_line_graph(_tutte12cage()))


def _build_gh33_incidence() -> nx.Graph:
    """Incidence graph of the split Cayley generalized hexagon H(3) = GH(3,3).

    Construction (Tits; Van Maldeghem, *Generalized Polygons*, 2.4.13): the
    points are the 364 points of the parabolic quadric Q(6,3) in PG(6,3) with
    equation X0*X4 + X1*X5 + X2*X6 = X3^2; the lines are those lines of Q(6,3)
    whose Grassmann coordinates p_ij = x_i*y_j - x_j*y_i satisfy
    p12 = p34, p54 = p32, p20 = p35, p65 = p30, p01 = p36, p46 = p31.
    Intersection array {4,3,3,3,3,3;1,1,1,1,1,4}.
    """
    p = 3
    allpts = np.array(_projective_points(7, p), dtype=np.int64)
    X = allpts
    qf = (X[:, 0] * X[:, 4] + X[:, 1] * X[:, 5] + X[:, 2] * X[:, 6] - X[:, 3] ** 2) % p
    pts = X[qf == 0]  # 364 singular points
    # polar bilinear form of the quadratic form above (up to a scalar)
    M = np.zeros((7, 7), dtype=np.int64)
    for i, j in ((0, 4), (1, 5), (2, 6)):
        M[i, j] = M[j, i] = 1
    M[3, 3] = -2
    B = (pts @ M @ pts.T) % p  # B[a, b] == 0  <=> a, b collinear on Q(6,3)
    conds = ((1, 2, 3, 4), (5, 4, 3, 2), (2, 0, 3, 5), (6, 5, 3, 0), (0, 1, 3, 6), (4, 6, 3, 1))
    lines = set()
    n = len(pts)
    for a in range(n):
        x = pts[a]
        for b in range(a + 1, n):
            if B[a, b]:
                continue
            y = pts[b]
            P = (np.outer(x, y) - np.outer(y, x)) % p
            if all(P[i, j] == P[k, l] for i, j, k, l in conds):
                lines.add(_span_points(x.tolist(), y.tolist(), p))
    point_labels = [tuple(int(c) for c in v) for v in pts]
    return _relabel(_incidence_graph(point_labels, lines))


# ---------------------------------------------------------------------------
# catalogue
# ---------------------------------------------------------------------------

_ENTRIES = [
    DistRegEntry("octahedron", "Octahedron J(4,2)", 6, 4, 2, _build_octahedron),
    DistRegEntry("paley9", "Paley graph P9 (= H(2,3))", 9, 4, 2, _build_paley9),
    DistRegEntry(
        "k55_minus_matching", "K_{5,5} minus a perfect matching", 10, 4, 3,
        _build_k55_minus_matching,
    ),
    DistRegEntry(
        "heawood_distance3", "Distance-3 graph of the Heawood graph", 14, 4, 3,
        _build_heawood_distance3,
    ),
    DistRegEntry(
        "petersen_line", "Line graph of the Petersen graph", 15, 4, 3,
        _build_petersen_line,
    ),
    DistRegEntry("hypercube4", "4-cube Q4", 16, 4, 4, _build_hypercube4),
    DistRegEntry(
        "heawood_line", "Line graph of the Heawood graph", 21, 4, 3, _build_heawood_line
    ),
    DistRegEntry(
        "pg23_incidence", "Incidence graph of PG(2,3)", 26, 4, 3, _build_pg23_incidence
    ),
    DistRegEntry(
        "ag24_minus_parallel_class",
        "Incidence graph of AG(2,4) minus a parallel class", 32, 4, 4,
        _build_ag24_minus_parallel_class,
    ),
    DistRegEntry("odd4", "Odd graph O4", 35, 4, 3, _build_odd4),
    DistRegEntry(
        "tutte8cage_line", "Line graph of Tutte's 8-cage", 45, 4, 4,
        _build_tutte8cage_line,
    ),
    DistRegEntry("doubled_odd4", "Doubled Odd graph 2.O4", 70, 4, 7, _build_doubled_odd4),
    DistRegEntry(
        "gq33_incidence", "Incidence graph of GQ(3,3)", 80, 4, 4, _build_gq33_incidence
    ),
    DistRegEntry(
        "tutte12cage_line", "Line graph of Tutte's 12-cage", 189, 4, 6,
        _build_tutte12cage_line,
    ),
    DistRegEntry(
        "gh33_incidence", "Incidence graph of GH(3,3)", 728, 4, 6, _build_gh33_incidence
    ),
]

CATALOGUE: dict[str, DistRegEntry] = {e.name: e for e in _ENTRIES}


def distreg_graph(name: str) -> nx.Graph:
    """Build the catalogued distance-regular graph called ``name``."""
    try:
        entry = CATALOGUE[name]
    except KeyError:
        raise ValueError(
            f"unknown distance-regular graph {name!r}; known: {', '.join(CATALOGUE)}"
        ) from None
    return entry.build()
