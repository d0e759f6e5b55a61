"""Build a Topology from an expression string or tree (families + expansion operators)."""
from __future__ import annotations

import inspect

from .expansions import OPERATORS
from .expr import Expr, parse
from .families import FAMILIES
from .topology import Topology, TopologyError

CONSTRUCTORS = {**FAMILIES, **OPERATORS}
MAX_NODES = 1 << 16


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
        inspect.signature(fn).bind(*args)
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


def _guard_size(tree: Expr) -> None:
    """Refuse absurd sizes before allocating (e.g. hypercube(40))."""
    a = [x for x in tree.args if isinstance(x, int)]
    est = None
    if tree.name == "hypercube" and a:
        est = 2 ** a[0]
    elif tree.name == "hamming" and len(a) == 2:
        est = a[1] ** a[0]
    elif tree.name in ("debruijn",) and len(a) == 2:
        est = a[0] ** a[1]
    elif tree.name == "kautz" and len(a) == 2:
        est = a[0] ** (a[1] + 1) + a[0] ** a[1]
    elif tree.name in ("torus", "twisted_torus") and a:
        est = 1
        for x in a[:2] if tree.name == "twisted_torus" else a:
            est *= max(x, 1)
    elif tree.name in ("complete", "ring", "biring", "circulant", "dcirculant", "bipartite") and a:
        est = a[0] * (2 if tree.name == "bipartite" else 1)
    elif tree.name == "genkautz" and len(a) == 2:
        est = a[1]
    if est is not None and est > MAX_NODES:
        raise TopologyError(f"{tree.name}: {est} nodes exceeds the limit of {MAX_NODES}")
