"""Build a Topology from an expression string or tree (families + expansion operators)."""
from __future__ import annotations

import functools
import inspect
import math

from services.synthesis.search.expansions import OPERATORS
from services.synthesis.topology.expr import Expr, parse
from services.synthesis.topology.families import FAMILIES
from services.synthesis.topology.graph import Topology, TopologyError

CONSTRUCTORS = {**FAMILIES, **OPERATORS}
_signature = functools.lru_cache(maxsize=None)(inspect.signature)
MAX_NODES = 1 << 16
MAX_ARCS = 1 << 24


def build(expr: str | Expr) -> Topology:
    """Parse (if needed) and construct; raises ExprError / TopologyError (both ValueError) on bad input."""
    tree = parse(expr) if isinstance(expr, str) else expr
    return _build(tree)


def _build(tree: Expr) -> Topology:
    fn = CONSTRUCTORS.get(tree.name)
    if fn is None:
        raise TopologyError(f"unknown topology {tree.name!r}; known: {', '.join(sorted(CONSTRUCTORS))}")
    args = [(_build(a) if isinstance(a, Expr) else a) for a in tree.args]
    try:
        _signature(fn).bind(*args)
    except TypeError:
        raise TopologyError(f"{tree.name}: wrong number of arguments; usage: {tree.name}"
                            f"{_usage(fn)}") from None
    for a in args:
        if isinstance(a, Topology) and fn not in OPERATORS.values():
            raise TopologyError(f"{tree.name}: arguments are numbers, not topologies")
    if fn in OPERATORS.values() and not isinstance(args[0] if args else None, Topology):
        raise TopologyError(f"{tree.name}: the first argument must be a topology expression")
    _guard_size(tree)
    return fn(*args)


def _usage(fn) -> str:
    return str(inspect.signature(fn)).replace("'", "").replace(" -> Topology", "")


def _power(base: int, exp: int) -> float:
    """base ** exp, but as inf once it is clearly beyond any limit (no huge integers)."""
    if base <= 1:
        return float(max(base, 0))
    return float(base) ** exp if exp * math.log2(base) < 200 else math.inf


def _guard_size(tree: Expr) -> None:
    """Refuse absurd sizes before allocating anything (e.g. hypercube(40), complete(65536))."""
    a = [x for x in tree.args if isinstance(x, int)]
    nodes = degree = None
    name = tree.name
    if name == "hypercube" and a:
        nodes, degree = _power(2, a[0]), a[0]
    elif name == "hamming" and len(a) == 2:
        nodes, degree = _power(a[1], a[0]), a[0] * (a[1] - 1)
    elif name == "debruijn" and len(a) == 2:
        nodes, degree = _power(a[0], a[1]), a[0]
    elif name == "kautz" and len(a) == 2:
        nodes, degree = _power(a[0], a[1] + 1) + _power(a[0], a[1]), a[0]
    elif name == "torus" and a:
        nodes, degree = math.prod(max(x, 1) for x in a), 2 * len(a)
    elif name == "twisted_torus" and len(a) >= 2:
        nodes, degree = a[0] * a[1], 4
    elif name == "complete" and a:
        nodes, degree = a[0], a[0] - 1
    elif name == "bipartite" and a:
        nodes, degree = 2 * a[0], a[0]
    elif name in ("ring", "biring") and a:
        nodes, degree = a[0], (a[1] if len(a) > 1 else (1 if name == "ring" else 2))
    elif name == "circulant" and a:
        nodes, degree = a[0], 2 * max(len(a) - 1, 2)
    elif name == "dcirculant" and a:
        nodes, degree = a[0], len(a) - 1
    elif name == "genkautz" and len(a) == 2:
        nodes, degree = a[1], a[0]
    if nodes is not None and nodes > MAX_NODES:
        raise TopologyError(f"{name}: {_count(nodes)} nodes exceeds the limit of {MAX_NODES}")
    if nodes is not None and degree is not None and nodes * degree > MAX_ARCS:
        raise TopologyError(f"{name}: {_count(nodes * degree)} arcs exceeds the limit of {MAX_ARCS}")


def _count(x: float) -> str:
    return str(int(x)) if x < 1e30 else "more than 10^30"
