"""Degraded topologies: a topology with failed links removed (TopoOpt section 7, App. C).

A failed port or fiber takes one arc (tail, head, lane) out of the digraph. What is left is a topology in
its own right as long as it stays strongly connected: every node still reaches every other, so BFB (paper
section 6, defined on any digraph) and the greedy link-chunk scheduler still build schedules on it. It is no
longer regular, and it keeps the nominal degree d of the topology it was cut from: the surviving links
still carry B/d each.

In the expression grammar the degraded topology is ``remove(G, 0>1, 5>6)``: one arc ``tail>head`` removed
per listed pair (list a pair twice to remove two parallel arcs). The canonical form lists the pairs sorted,
and a removal from a removal is one ``remove`` of the base topology.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.synthesis.topology.expr import parse
from services.synthesis.topology.graph import Topology, TopologyError

__all__ = ["Degraded", "remove", "remove_arcs"]


@dataclass(frozen=True)
class Degraded:
    """A degraded topology and where its arcs come from: arc i of `topology` is arc `kept[i]` of
    `original`; `removed` lists the original indices of the failed arcs."""

    original: Topology
    topology: Topology
    kept: np.ndarray
    removed: np.ndarray


def remove_arcs(topology: Topology, failed) -> Degraded:
    """Remove failed arcs given as (tail, head) or (tail, head, lane) triples.

    A pair without a lane removes the highest-numbered lane of tail>head that is not removed already (lanes
    of parallel arcs are interchangeable in the graph; `kept` says which physical one survived).

    Parameters
    ----------
    topology : Topology
    failed : iterable of (tail, head) or (tail, head, lane)

    Returns
    -------
    Degraded

    Raises
    ------
    TopologyError
        When a named arc does not exist (or is named twice), or the rest is not strongly connected.

    Notes
    -----
    O(arcs + failed log arcs), plus the strong-connectivity check of the new topology (two breadth-first
    searches).

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> cut = remove_arcs(build("torus(3, 3)"), [(0, 1)])
    >>> cut.topology.expr, cut.topology.arcs, cut.topology.degree, cut.topology.regular
    ('remove(torus(3, 3), 0>1)', 35, 4, False)
    """
    g = topology
    failed = list(failed)
    if len(failed) >= g.arcs:          # sized before any work: the rest must keep at least one arc per node
        raise TopologyError(f"remove: {len(failed)} arcs named, but {g.expr} has only {g.arcs}")
    triples = [_triple(g, a) for a in failed]
    if not triples:
        raise TopologyError(f"remove: name at least one arc of {g.expr} to remove")
    index: list[int] = []
    taken: set[int] = set()
    for tail, head, lane in triples:
        mult = int(g.multiplicity([tail], [head])[0]) if 0 <= tail < g.nodes and 0 <= head < g.nodes else 0
        if mult == 0:
            raise TopologyError(f"remove: {g.expr} has no arc {tail}>{head}")
        if lane is None:
            free = [k for k in range(mult - 1, -1, -1) if int(g.arc_index([tail], [head], [k])[0]) not in taken]
            if not free:
                raise TopologyError(f"remove: {g.expr} has {mult} arc{'s' if mult > 1 else ''} {tail}>{head}, "
                                    f"fewer than the removal names")
            lane = free[0]
        a = int(g.arc_index([tail], [head], [lane])[0])
        if a < 0:
            raise TopologyError(f"remove: {g.expr} has no lane {lane} of arc {tail}>{head} "
                                f"(it has {mult} parallel arc{'s' if mult > 1 else ''})")
        if a in taken:
            raise TopologyError(f"remove: arc {tail}>{head} lane {lane} is named twice")
        taken.add(a)
        index.append(a)
    removed = np.array(sorted(index), dtype=np.int64)
    keep = np.ones(g.arcs, dtype=bool)
    keep[removed] = False
    kept = np.flatnonzero(keep)
    expr = _canonical(g, [(int(g.tails[a]), int(g.heads[a])) for a in removed])
    try:
        cut = Topology(g.nodes, g.tails[kept], g.heads[kept], expr, degree=g.degree)
    except TopologyError as exc:
        if "strongly connected" not in str(exc):
            raise
        raise TopologyError(f"{expr}: not strongly connected after the removal ({_cut_off(g, kept)})") from None
    return Degraded(g, cut, kept, removed)


def remove(topology: Topology, *arcs: tuple[int, int]) -> Topology:
    """The expression operator ``remove(G, a>b, ...)``: G without the listed arcs (see `remove_arcs`).

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> build("remove(circulant(8, 1, 2), 3>5, 0>1)").expr
    'remove(circulant(8, 1, 2), 0>1, 3>5)'
    """
    if not isinstance(topology, Topology):
        raise TopologyError("remove: the first argument must be a topology expression")
    if not all(isinstance(a, tuple) and len(a) == 2 for a in arcs):
        raise TopologyError("remove: arcs are written tail>head, e.g. remove(torus(4, 4), 0>1, 5>6)")
    return remove_arcs(topology, arcs).topology


def _triple(g: Topology, arc) -> tuple[int, int, int | None]:
    try:
        items = tuple(int(x) for x in arc)
    except (TypeError, ValueError):
        raise TopologyError(f"remove: an arc is (tail, head) or (tail, head, lane), got {arc!r}") from None
    if len(items) not in (2, 3):
        raise TopologyError(f"remove: an arc is (tail, head) or (tail, head, lane), got {arc!r}")
    tail, head = items[:2]
    if not (0 <= tail < g.nodes and 0 <= head < g.nodes):
        raise TopologyError(f"remove: arc {tail}>{head} names a node outside 0..{g.nodes - 1}")
    return tail, head, (items[2] if len(items) == 3 else None)


def _canonical(g: Topology, pairs: list[tuple[int, int]]) -> str:
    """remove(base, sorted pairs), folding a removal from a removal into one."""
    base = g.expr
    if base.startswith("remove("):
        tree = parse(base)
        base = str(tree.args[0])
        pairs = pairs + [a for a in tree.args[1:]]
    return f"remove({base}, {', '.join(f'{a}>{b}' for a, b in sorted(pairs))})"


def _cut_off(g: Topology, kept: np.ndarray) -> str:
    """Name one ordered pair that lost every path."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    adj = csr_matrix((np.ones(kept.size, dtype=np.int8), (g.tails[kept], g.heads[kept])), shape=(g.nodes, g.nodes))
    n_comp, label = connected_components(adj, directed=True, connection="strong")
    first = int(np.flatnonzero(label != label[0])[0])
    return f"{n_comp} strong components, e.g. nodes 0 and {first} are no longer mutually reachable"
