"""The size of a topology expression, computed from its parse tree before anything is built.

Every family and operator has a *sizer*: a function of the same arguments as its constructor (sub-expressions
already sized) that returns the node count N and the degree d of the result, validating only what it needs
to count. `size(expr)` walks the tree bottom up and returns a `Size` with

- ``nodes`` N and ``degree`` d of the topology the expression names (``arcs`` = N d);
- ``work``: the arcs materialised while building it, intermediate graphs included (``line(G, k)`` builds
  k graphs; a product builds its factors first), which is what construction costs in time and memory;
- ``transfers``: a lower bound on the transfers of any allgather schedule on it, N(N - 1) (every node
  receives the N - 1 other shards, at least one transfer each).

Counts saturate at ``HUGE`` (2^62), so ``hypercube(10**17)`` is sized in constant time. `check_build`
refuses what `build` would not finish (nodes beyond MAX_NODES, arcs or work beyond MAX_ARCS); callers with
tighter limits (the schedule builders, the API's evaluation) compare the `Size` with their own.

A new operator is one entry in ``SIZERS``: ``SIZERS["name"] = lambda g, *args: (nodes, degree)`` where ``g``
is the `Size` of its topology argument.

Examples
--------
>>> s = size("line(circulant(16, 1, 4), 3)")
>>> s.nodes, s.degree, s.arcs
(1024, 4, 4096)
>>> size("power(complete(64), 4)").nodes
16777216
>>> check_build(size("power(complete(64), 4)"))
Traceback (most recent call last):
...
services.synthesis.topology.graph.TopologyError: power: 16777216 nodes exceeds the limit of 65536
"""
from __future__ import annotations

import inspect
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from services.synthesis.topology.expr import Expr, parse
from services.synthesis.topology.graph import TopologyError

__all__ = ["Size", "SIZERS", "OPERATOR_NAMES", "size", "check_build", "MAX_NODES", "MAX_ARCS", "HUGE"]

HUGE = 1 << 62
MAX_NODES = 1 << 16
MAX_ARCS = 1 << 24


@dataclass(frozen=True)
class Size:
    """N, d and construction work of an expression (saturating at HUGE)."""

    expr: str
    nodes: int
    degree: int
    work: int
    parts: tuple["Size", ...] = field(default=(), repr=False, compare=False)

    @property
    def arcs(self) -> int:
        return _cap(self.nodes * self.degree)

    @property
    def transfers(self) -> int:
        """At least N(N - 1): every node receives the N - 1 other shards."""
        return _cap(self.nodes * max(self.nodes - 1, 0))


def _cap(x: int) -> int:
    return min(int(x), HUGE)


def _pow(base: int, exp: int) -> int:
    """base ** exp, saturating at HUGE without computing huge integers."""
    if base <= 1 or exp <= 0:
        return max(base, 0) if exp > 0 else 1
    return HUGE if exp * math.log2(base) >= 62 else _cap(base ** exp)


def _int(label: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        shown = value.expr if isinstance(value, Size) else repr(value)
        raise TopologyError(f"{label} must be an integer, got {shown}")
    return value


def _topology(name: str, g) -> "Size":
    if not isinstance(g, Size):
        raise TopologyError(f"{name}: the first argument must be a topology expression")
    return g


# ----- families: (nodes, degree) ------------------------------------------------------------------------
def _complete(n):
    n = _int("complete: n", n)
    return n, n - 1


def _bipartite(m):
    m = _int("bipartite: m", m)
    return 2 * m, m


def _ring(n, d=1):
    return _int("ring: n", n), _int("ring: d", d)


def _biring(n, d=2):
    return _int("biring: n", n), _int("biring: d", d)


def _circulant(n, *offsets):
    n = _int("circulant: n", n)
    offsets = offsets or (1, 2)                        # Theorem 22's pair: two offsets
    return n, sum(1 if 2 * _int("circulant: offset", a) == n else 2 for a in offsets)


def _dcirculant(n, *offsets):
    for a in offsets:
        _int("dcirculant: offset", a)
    return _int("dcirculant: n", n), len(offsets)


def _hamming(n, q):
    n, q = _int("hamming: n", n), _int("hamming: q", q)
    return _pow(q, n), n * (q - 1)


def _hypercube(n):
    n = _int("hypercube: n", n)
    return _pow(2, n), n


def _torus(*dims):
    nodes = 1
    for s in dims:
        nodes = _cap(nodes * max(_int("torus: dimension", s), 0))
    return nodes, sum(1 if s == 2 else 2 for s in dims)


def _twisted_torus(a, b, shift=None):
    a, b = _int("twisted_torus: a", a), _int("twisted_torus: b", b)
    shift = a // 2 if shift is None else _int("twisted_torus: shift", shift)
    # a generator that is its own inverse is one duplex link: unit 0 when a = 2, unit 1 when b = 2 and
    # the twist carries it back to 0
    return _cap(a * b), (1 if a == 2 else 2) + (1 if b == 2 and a and shift % a == 0 else 2)


def _genkautz(d, m):
    return _int("genkautz: m", m), _int("genkautz: d", d)


def _kautz(d, n):
    d, n = _int("kautz: d", d), _int("kautz: n", n)
    return _cap(_pow(d, n + 1) + _pow(d, n)), d


def _debruijn(d, n):
    d, n = _int("debruijn: d", d), _int("debruijn: n", n)
    return _pow(d, n), d


def _distreg(name):
    from services.synthesis.topology.distreg import CATALOGUE

    if not isinstance(name, str):
        raise TopologyError(f"distreg: expects a graph name, got {name!r}; known: {', '.join(CATALOGUE)}")
    if name not in CATALOGUE:
        raise TopologyError(f"distreg: unknown distance-regular graph {name!r}; known: {', '.join(CATALOGUE)}")
    return CATALOGUE[name].nodes, CATALOGUE[name].degree


def _edges(n, *arcs):
    """edges(n, a>b, ...): the nominal degree is the largest out- or in-degree of any node (what the builder
    gives the topology), not the average; a self-loop takes a port like any arc."""
    n = _int("edges: n", n)
    if not all(isinstance(a, tuple) and len(a) == 2 for a in arcs):
        return n, -(-len(arcs) // max(n, 1))              # the builder refuses these with its own message
    out_deg, in_deg = Counter(a for a, _ in arcs), Counter(b for _, b in arcs)
    return n, max(max(out_deg.values(), default=0), max(in_deg.values(), default=0))


# ----- operators: the first argument is a Size ----------------------------------------------------------
def _line(g, times=1):
    g = _topology("line", g)
    times = _int("line: the repeat count", times)
    return _cap(g.nodes * _pow(g.degree, times)), g.degree


def _degree(g, n):
    g = _topology("degree", g)
    n = _int("degree: the expansion factor", n)
    return _cap(g.nodes * n), _cap(g.degree * n)


def _product(*factors):
    if len(factors) < 2 or not all(isinstance(f, Size) for f in factors):
        raise TopologyError("product: needs at least two topologies")
    nodes = 1
    for f in factors:
        nodes = _cap(nodes * f.nodes)
    return nodes, _cap(sum(f.degree for f in factors))


def _power(g, n):
    g = _topology("power", g)
    n = _int("power: the exponent", n)
    return _pow(g.nodes, n), _cap(g.degree * n)


def _bidir(g):
    g = _topology("bidir", g)
    return g.nodes, _cap(2 * g.degree)


def _remove(g, *arcs):
    """remove(G, a>b, ...) keeps G's nodes and nominal degree (topology.failures); it names at most G's arcs."""
    g = _topology("remove", g)
    if not arcs:
        raise TopologyError(f"remove: name at least one arc of {g.expr} to remove")
    if not all(isinstance(a, tuple) and len(a) == 2 for a in arcs):
        raise TopologyError("remove: arcs are written tail>head, e.g. remove(torus(4, 4), 0>1, 5>6)")
    if len(arcs) > g.arcs:
        raise TopologyError(f"remove: {len(arcs)} arcs named, the topology has {g.arcs}")
    return g.nodes, g.degree


SIZERS: dict[str, Callable[..., tuple[int, int]]] = {
    "complete": _complete, "bipartite": _bipartite, "ring": _ring, "biring": _biring,
    "circulant": _circulant, "dcirculant": _dcirculant, "hamming": _hamming, "hypercube": _hypercube,
    "torus": _torus, "twisted_torus": _twisted_torus, "genkautz": _genkautz, "kautz": _kautz,
    "debruijn": _debruijn, "distreg": _distreg, "edges": _edges,
    "line": _line, "degree": _degree, "product": _product, "power": _power, "bidir": _bidir,
    "remove": _remove,
}
OPERATOR_NAMES = frozenset({"line", "degree", "product", "power", "bidir", "remove"})


def _extra_work(tree: Expr, args: list, nodes: int, degree: int) -> int:
    """Arcs of the intermediate graphs an operator builds beyond its result: L^i(G) for i < k."""
    if tree.name == "line" and len(args) > 1 and args[1] > 1:
        g: Size = args[0]
        if g.degree <= 1:
            return _cap(g.arcs * (args[1] - 1))
        return _cap(g.arcs * (_pow(g.degree, args[1]) - g.degree) // (g.degree - 1))   # sum of N d^i, i < k
    return 0


def size(expr: str | Expr) -> Size:
    """Size an expression from its parse tree (raises ExprError / TopologyError, both ValueError, for an
    expression that names no topology: unknown names, wrong arity, arguments of the wrong kind).

    Examples
    --------
    >>> size("torus(16, 16)")
    Size(expr='torus(16, 16)', nodes=256, degree=4, work=1024)
    """
    tree = parse(expr) if isinstance(expr, str) else expr
    return _size(tree)


def _size(tree: Expr) -> Size:
    sizer = SIZERS.get(tree.name)
    if sizer is None:
        raise TopologyError(f"unknown topology {tree.name!r}; known: {', '.join(sorted(SIZERS))}")
    args = [(_size(a) if isinstance(a, Expr) else a) for a in tree.args]
    try:
        inspect.signature(sizer).bind(*args)
    except TypeError:
        usage = str(inspect.signature(sizer)).replace("'", "")
        raise TopologyError(f"{tree.name}: wrong number of arguments; usage: {tree.name}{usage}") from None
    if tree.name not in OPERATOR_NAMES and any(isinstance(a, Size) for a in args):
        raise TopologyError(f"{tree.name}: arguments are numbers, not topologies")
    nodes, degree = (max(_cap(x), 0) for x in sizer(*args))
    parts = tuple(a for a in args if isinstance(a, Size))
    work = _cap(sum(p.work for p in parts) + nodes * degree + _extra_work(tree, args, nodes, degree))
    return Size(str(tree), nodes, degree, work, parts)


def check_build(s: Size, *, max_nodes: int = MAX_NODES, max_arcs: int = MAX_ARCS) -> Size:
    """Refuse (TopologyError naming the innermost offending family or operator) an expression whose graph,
    or a graph built on the way, exceeds the limits; returns `s`."""
    for p in s.parts:
        check_build(p, max_nodes=max_nodes, max_arcs=max_arcs)
    name = s.expr.split("(", 1)[0]
    if s.nodes > max_nodes:
        raise TopologyError(f"{name}: {_count(s.nodes)} nodes exceeds the limit of {max_nodes}")
    if s.arcs > max_arcs:
        raise TopologyError(f"{name}: {_count(s.arcs)} arcs exceeds the limit of {max_arcs}")
    if s.work > max_arcs:
        raise TopologyError(f"{name}: building it materialises {_count(s.work)} arcs, beyond the limit of "
                            f"{max_arcs}")
    return s


def _count(x: int) -> str:
    return "more than 2^62" if x >= HUGE else str(x)
