"""Build a Topology from an expression string or tree (families + expansion operators)."""
from __future__ import annotations

from services.synthesis.topology.expansions import OPERATORS
from services.synthesis.topology.expr import Expr, parse
from services.synthesis.topology.failures import remove
from services.synthesis.topology.families import FAMILIES
from services.synthesis.topology.graph import Topology
from services.synthesis.topology.size import check_build, size

# operators take a topology first; remove() only shrinks its argument (sized by it in topology.size)
TOPOLOGY_OPERATORS = {**OPERATORS, "remove": remove}
CONSTRUCTORS = {**FAMILIES, **TOPOLOGY_OPERATORS}


def build(expr: str | Expr) -> Topology:
    """Parse (if needed), size the expression from its tree (services.synthesis.topology.size: nodes, arcs
    and the graphs built on the way, refused beyond MAX_NODES / MAX_ARCS before anything is allocated),
    then construct. Raises ExprError / TopologyError (both ValueError) on bad input."""
    tree = parse(expr) if isinstance(expr, str) else expr
    check_build(size(tree))
    return _construct(tree)


def _construct(tree: Expr) -> Topology:
    args = [(_construct(a) if isinstance(a, Expr) else a) for a in tree.args]
    return CONSTRUCTORS[tree.name](*args)
