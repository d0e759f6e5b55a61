"""Generative and base topology families (paper App. F, Table 9).

Every constructor validates its parameters (TopologyError with the reason) and returns a Topology whose
`expr` is the canonical expression. Vertex-transitive families are built as Cayley graphs of abelian groups
(`Translation`), which gives BFB its one-node-per-step shortcut.
"""
from __future__ import annotations

import math

import numpy as np

from services.synthesis.topology.graph import Topology, TopologyError, Translation


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise TopologyError(message)


def _int(name: str, value, minimum: int) -> int:
    _require(isinstance(value, int) and not isinstance(value, bool),
             f"{name} must be an integer, got {value!r}")
    _require(value >= minimum, f"{name} must be at least {minimum}, got {value}")
    return value


def cayley(translation: Translation, generators: list[int], expr: str) -> Topology:
    """Cayley digraph: arcs x -> x + g for every g in the multiset `generators` (group elements)."""
    n = translation.size
    x = np.arange(n)
    tails = np.tile(x, len(generators))
    heads = translation.add(tails, np.repeat(np.asarray(generators, dtype=np.int64), n))
    return Topology(n, tails, heads, expr, translation=translation)


def _symmetric(translation: Translation, generators: list[int]) -> list[int]:
    """g and -g for every g; an involution (g = -g) is one duplex link, not two parallel arcs."""
    out = []
    for g in generators:
        out.append(g)
        neg = translation.negate(g)
        if neg != g:
            out.append(neg)
    return out


def complete(n: int) -> Topology:
    """K_n: N = n, d = n - 1, diameter 1 (Table 9)."""
    _int("complete: n", n, 2)
    t = Translation((n,))
    return cayley(t, list(range(1, n)), f"complete({n})")


def bipartite(m: int) -> Topology:
    """K_{m,m}: the two parts are the even and the odd labels of Z_{2m} (Fig. 1, Table 9)."""
    _int("bipartite: m", m, 1)
    t = Translation((2 * m,))
    return cayley(t, list(range(1, 2 * m, 2)), f"bipartite({m})")


def ring(n: int, d: int = 1) -> Topology:
    """UniRing(d, n): directed n-cycle, d parallel arcs per hop (App. F.1)."""
    _int("ring: n", n, 2)
    _int("ring: d", d, 1)
    return cayley(Translation((n,)), [1] * d, f"ring({n})" if d == 1 else f"ring({n}, {d})")


def biring(n: int, d: int = 2) -> Topology:
    """BiRing(d, n): bidirectional n-cycle, d/2 parallel links to each neighbour (App. F.1)."""
    _int("biring: n", n, 3)
    _int("biring: d", d, 2)
    _require(d % 2 == 0, f"biring: d must be even (d/2 links per direction), got {d}")
    return cayley(Translation((n,)), [1, n - 1] * (d // 2), f"biring({n})" if d == 2 else f"biring({n}, {d})")


def theorem22_offsets(n: int) -> tuple[int, int]:
    """Offsets {m, m+1} of the minimum-diameter 2-offset circulant on n > 6 nodes (Theorem 22)."""
    _require(n > 6, f"circulant: Theorem 22 offsets need n > 6, got {n}")
    m = math.ceil((-1 + math.sqrt(2 * n - 1)) / 2)
    return m, m + 1


def circulant(n: int, *offsets: int) -> Topology:
    """C(n, {a_1..a_k}): i ~ i +- a_j, degree 2k (an offset with 2a = n is one duplex link).

    With no offsets, Theorem 22's {m, m+1} (diameter m = ceil((sqrt(2n-1)-1)/2), BW-optimal BFB).
    A repeated offset gives parallel links (the paper's multi-edge circulants for degrees 4j).
    """
    _int("circulant: n", n, 3)
    if not offsets:
        offsets = theorem22_offsets(n)
    for a in offsets:
        _int("circulant: offset", a, 1)
        _require(a < n, f"circulant: offset {a} must be below n = {n}")
    _require(math.gcd(n, *offsets) == 1,
             f"circulant: gcd(n, offsets) = {math.gcd(n, *offsets)} != 1, so the graph is disconnected")
    t = Translation((n,))
    return cayley(t, _symmetric(t, list(offsets)), f"circulant({n}, {', '.join(map(str, offsets))})")


def dcirculant(n: int, *offsets: int) -> Topology:
    """Directed circulant: x -> x + a_j (mod n). dcirculant(d+2, 1..d) is the N = d+2 base of Fig. 3."""
    _int("dcirculant: n", n, 2)
    _require(len(offsets) >= 1, "dcirculant: needs at least one offset")
    for a in offsets:
        _int("dcirculant: offset", a, 1)
        _require(a < n, f"dcirculant: offset {a} must be below n = {n}")
    _require(math.gcd(n, *offsets) == 1,
             f"dcirculant: gcd(n, offsets) = {math.gcd(n, *offsets)} != 1, so the graph is not strongly connected")
    return cayley(Translation((n,)), list(offsets), f"dcirculant({n}, {', '.join(map(str, offsets))})")


def _unit(t: Translation, axis: int, step: int = 1) -> int:
    coords = [np.zeros(1, dtype=np.int64) for _ in t.moduli]
    coords[axis] = coords[axis] + step
    return int(t.index(coords)[0])


def hamming(n: int, q: int) -> Topology:
    """H(n, q) = K_q^{box n}: N = q^n, d = n(q-1), diameter n (Table 9)."""
    _int("hamming: n", n, 1)
    _int("hamming: q", q, 2)
    t = Translation((q,) * n)
    gens = [_unit(t, axis, s) for axis in range(n) for s in range(1, q)]
    return cayley(t, gens, f"hamming({n}, {q})")


def hypercube(n: int) -> Topology:
    """Q_n = H(n, 2): N = 2^n, d = n."""
    _int("hypercube: n", n, 1)
    t = Translation((2,) * n)
    return cayley(t, [_unit(t, axis) for axis in range(n)], f"hypercube({n})")


def torus_factorisations(n: int, smallest: int = 2) -> tuple[tuple[int, ...], ...]:
    """Every torus shape on n nodes: the non-decreasing factorisations of n into factors >= `smallest`
    (n itself included), e.g. 12 -> (12,), (2, 6), (2, 2, 3), (3, 4).

    >>> torus_factorisations(12)
    ((12,), (2, 6), (2, 2, 3), (3, 4))
    """
    out = [(n,)] if n >= smallest else []
    for f in range(smallest, math.isqrt(n) + 1):
        if n % f == 0:
            out += [(f, *rest) for rest in torus_factorisations(n // f, f)]
    return tuple(out)


def torus(*dims: int) -> Topology:
    """d_1 x ... x d_k torus = product of bidirectional rings; a size-2 dimension is one duplex link
    (K_2), which keeps the product simple so Theorem 13 gives BW-optimal BFB (section 5.3, Theorem 13)."""
    _require(len(dims) >= 1, "torus: needs at least one dimension")
    for s in dims:
        _int("torus: dimension", s, 2)
    t = Translation(tuple(dims))
    gens = _symmetric(t, [_unit(t, axis) for axis in range(len(dims))])
    return cayley(t, gens, f"torus({', '.join(map(str, dims))})")


def twisted_torus(a: int, b: int, shift: int | None = None) -> Topology:
    """Twisted 2-D torus (Camara et al.; TPU v4's twisted tori): an a x b torus whose wrap-around in
    the second dimension also moves `shift` steps along the first ((x, b-1) -> (x + shift, 0)).
    The default shift a // 2 gives the rectangular twisted torus RTT when a = 2b."""
    _int("twisted_torus: a", a, 2)
    _int("twisted_torus: b", b, 2)
    if shift is None:
        shift = a // 2
    _int("twisted_torus: shift", shift, 0)
    _require(shift < a, f"twisted_torus: shift must be below a = {a}, got {shift}")
    t = Translation((a, b), twist=(1, 0, shift))
    gens = _symmetric(t, [_unit(t, 0), _unit(t, 1)])
    canon = f"twisted_torus({a}, {b})" if shift == a // 2 else f"twisted_torus({a}, {b}, {shift})"
    return cayley(t, gens, canon)


def genkautz(d: int, m: int) -> Topology:
    """Generalized Kautz Pi_{d,m} (Imase-Itoh; App. F.2): x -> (-d x - a) mod m, a = 1..d.
    Self-loops when m mod (d+1) != 0; diameter at most one above the Moore bound (Theorem 21)."""
    _int("genkautz: d", d, 1)
    _int("genkautz: m", m, d + 1)
    x = np.arange(m, dtype=np.int64)
    tails = np.repeat(x, d)
    heads = (-d * tails - np.tile(np.arange(1, d + 1), m)) % m
    return Topology(m, tails, heads, f"genkautz({d}, {m})")


def kautz(d: int, n: int) -> Topology:
    """Kautz K(d, n) = L^n(K_{d+1}) = Pi_{d, d^{n+1} + d^n}: N = d^n (d+1), diameter n + 1 (Table 9)."""
    _int("kautz: d", d, 2)
    _int("kautz: n", n, 0)
    g = genkautz(d, d ** (n + 1) + d ** n)
    return Topology(g.nodes, g.tails, g.heads, f"kautz({d}, {n})")


def debruijn(d: int, n: int) -> Topology:
    """de Bruijn DBJ(d, n): x -> (d x + a) mod d^n, a = 0..d-1; self-loops at 0 and d^n - 1 (Table 9)."""
    _int("debruijn: d", d, 2)
    _int("debruijn: n", n, 1)
    m = d ** n
    x = np.arange(m, dtype=np.int64)
    tails = np.repeat(x, d)
    heads = (d * tails + np.tile(np.arange(d), m)) % m
    return Topology(m, tails, heads, f"debruijn({d}, {n})")


def distreg(name: str) -> Topology:
    """A catalogued distance-regular graph (App. F.3, Table 8); Theorem 18 makes BFB BW-optimal."""
    from services.synthesis.topology.distreg import CATALOGUE, distreg_graph

    _require(isinstance(name, str), f"distreg: expects a graph name, got {name!r}; known: {', '.join(CATALOGUE)}")
    try:
        g = distreg_graph(name)
    except ValueError as exc:
        raise TopologyError(str(exc)) from None
    edges = np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2)
    tails = np.concatenate([edges[:, 0], edges[:, 1]])
    heads = np.concatenate([edges[:, 1], edges[:, 0]])
    return Topology(g.number_of_nodes(), tails, heads, f"distreg({name})")


def edges(n: int, *arcs: tuple[int, int]) -> Topology:
    """An explicit arc list: edges(n, a>b, ...): any strongly connected digraph (regular or not; its nominal
    degree is the largest out- or in-degree)."""
    _int("edges: n", n, 2)
    _require(all(isinstance(a, tuple) and len(a) == 2 for a in arcs),
             "edges: arcs are written tail>head, e.g. edges(3, 0>1, 1>2, 2>0)")
    _require(len(arcs) > 0, "edges: needs at least one arc")
    arr = np.array(arcs, dtype=np.int64)
    canon = f"edges({n}, {', '.join(f'{a}>{b}' for a, b in arcs)})"
    return Topology(n, arr[:, 0], arr[:, 1], canon)


FAMILIES = {
    "complete": complete, "bipartite": bipartite, "ring": ring, "biring": biring,
    "circulant": circulant, "dcirculant": dcirculant, "hamming": hamming, "hypercube": hypercube,
    "torus": torus, "twisted_torus": twisted_torus, "genkautz": genkautz, "kautz": kautz,
    "debruijn": debruijn, "distreg": distreg, "edges": edges,
}
