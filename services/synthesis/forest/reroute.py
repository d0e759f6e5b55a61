"""Tree packing at scale: shortest-path trees rerouted, one parent at a time, towards the exact rate x*.

The exact construction alone (`lovasz`: Edmonds' branching theorem made constructive after Lovasz, one max flow
per tree arc) asks about N^2 max flows and, its arc order being greedy, grows deep trees (late trees take
what is left: height 23 on an 8 x 8 torus of diameter 8). The balanced heuristic (`balanced`) keeps every tree a
shortest-path tree, so a node whose shortest paths from some root all end on a slow arc must take it: 1.52x below
x* on an 8 x 8 torus with two slow arcs into one node.

Every tree has exactly N - 1 arcs, one into each node other than its root, so the load of a packing is decided
node by node: node v's K (N - 1) tree entries (K trees per root, weight 1 each) are spread over v's in-arcs, and
the rate is x = K / max_e (L_e / c_e) (L_e the trees using arc e, c_e its integer capacity,
`packing.integer_capacities`). Edmonds' theorem says x* = min_S c(delta_in S) / (N - |S|) is reachable; when the
minimum is at a single node (every example of the targets: a node's in-links are the bottleneck) the optimum
spreads each tight node's entries in proportion to its in-arcs' capacities. The reroute starts from the balanced
shortest-path trees (each root's copied K times) and repeats sweeps over every (node v, tree T): v's parent arc e
in T moves to the in-arc e' of v that is least loaded relative to its capacity, when that strictly lowers the
larger of the two ratios ((L_e' + 1) / c_e' < L_e / c_e) and the tail of e' is not in v's subtree in T (the tree
stays an arborescence: checked by walking e''s tail up to the root). Among the allowed arcs the one whose tail is
shallowest wins. Sweeps stop when one moves nothing or after SWEEPS. Then, at the rate reached, parents move to
shallower tails wherever the new arc stays within that rate (the pipeline's depth, `pipeline`, shrinks; the rate
does not change), again until a sweep moves nothing.

The rate reached is not guaranteed to be x* (a tight set larger than one node can block every move, and K trees of
weight 1 cannot split a node's entries in a ratio whose denominator does not divide K); `pack_trees` computes x*
exactly beside it and, where the trees miss it, `repair` keeps all but a few of them and rebuilds those at x*.
O(SWEEPS K N^2 d h) time (d the in-degree, h the height), compiled.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
from numba import njit

from services.synthesis.forest.balanced import grown_trees
from services.synthesis.topology.graph import Topology

__all__ = ["rerouted_trees", "SWEEPS"]

SWEEPS = 12
"""Sweeps over every (node, tree) parent before giving up on further moves."""


@njit(cache=True, nogil=True)
def _depths(parent, tails, root, n, depth, known):
    """depth[v] of every node of one tree from its parent arcs (walk up to a node of known depth)."""
    known[:] = False
    known[root] = True
    depth[root] = 0
    stack = np.empty(n, np.int64)
    for v in range(n):
        if known[v]:
            continue
        top, u = 0, v
        while not known[u]:
            stack[top] = u
            top += 1
            u = tails[parent[u]]
        d = depth[u]
        while top > 0:
            top -= 1
            d += 1
            depth[stack[top]] = d
            known[stack[top]] = True


@njit(cache=True, nogil=True)
def _below(parent, tails, u, v):
    """Whether u is in v's subtree of the tree `parent` (v on the path from u up to the root, u itself
    included): a parent arc from u would close a cycle."""
    w = u
    while w != v and parent[w] >= 0:
        w = tails[parent[w]]
    return w == v


@njit(cache=True, nogil=True)
def _reroute(n, k, tails, heads, cap, in_ptr, in_arcs, parent, depth, load, sweeps):
    """Move parents to less loaded in-arcs (see the module docstring); parent, depth, load updated in place.
    Returns the sweeps run."""
    trees = parent.shape[0]
    known = np.empty(n, np.bool_)
    for sweep in range(sweeps):
        moved = 0
        for v in range(n):
            for tr in range(trees):
                e = parent[tr, v]
                if e < 0:
                    continue
                best, bn, bc, bd = -1, 0, 1, 0
                for i in range(in_ptr[v], in_ptr[v + 1]):
                    f = in_arcs[i]
                    if f == e:
                        continue
                    num, den = load[f] + 1, cap[f]
                    if num * cap[e] >= load[e] * den:          # no strict improvement of the pair's max
                        continue
                    u = tails[f]
                    du = depth[tr, u]
                    if best >= 0 and (num * bc > bn * den or (num * bc == bn * den and du >= bd)):
                        continue
                    if not _below(parent[tr], tails, u, v):
                        best, bn, bc, bd = f, num, den, du
                if best >= 0:
                    load[e] -= 1
                    load[best] += 1
                    parent[tr, v] = best
                    moved += 1
        for tr in range(trees):
            root = tr // k
            _depths(parent[tr], tails, root, n, depth[tr], known)
        if moved == 0:
            return sweep + 1
    return sweeps


@njit(cache=True, nogil=True)
def _shallow(n, k, tails, cap, in_ptr, in_arcs, parent, depth, load, rn, rd, sweeps):
    """Move parents to shallower tails while every arc stays within the ratio rn / rd (the rate is kept)."""
    trees = parent.shape[0]
    known = np.empty(n, np.bool_)
    for sweep in range(sweeps):
        moved = 0
        for tr in range(trees):
            for v in range(n):
                e = parent[tr, v]
                if e < 0:
                    continue
                best, bd = -1, depth[tr, tails[e]]
                for i in range(in_ptr[v], in_ptr[v + 1]):
                    f = in_arcs[i]
                    u = tails[f]
                    if f == e or depth[tr, u] >= bd or (load[f] + 1) * rd > rn * cap[f]:
                        continue
                    if not _below(parent[tr], tails, u, v):
                        best, bd = f, depth[tr, u]
                if best >= 0:
                    load[e] -= 1
                    load[best] += 1
                    parent[tr, v] = best
                    moved += 1
            _depths(parent[tr], tails, tr // k, n, depth[tr], known)
        if moved == 0:
            return sweep + 1
    return sweeps


def rerouted_trees(g: Topology, capacity: np.ndarray, per_root: int = 1, *,
                   sweeps: int = SWEEPS) -> tuple[Fraction, np.ndarray, np.ndarray]:
    """`per_root` (K) spanning out-trees of weight 1 per root on integer arc capacities, rerouted from the balanced
    shortest-path trees towards x* (see the module docstring): (rate x = K / max_e (L_e / c_e),
    parent_arc[r K + j, v] the arc of g into v in root r's j-th tree or -1 at the root, depth[r K + j, v]).

    >>> from services.synthesis.topology.catalog import build
    >>> rate, parent, depth = rerouted_trees(build("ring(4)"), np.ones(4, np.int64))
    >>> rate, parent[0].tolist(), depth[0].tolist()
    (Fraction(1, 3), [-1, 0, 1, 2], [0, 1, 2, 3])
    """
    n = g.nodes
    if isinstance(per_root, bool) or not isinstance(per_root, (int, np.integer)) or per_root < 1:
        raise ValueError(f"need at least one tree per root, got {per_root!r}")
    k = int(per_root)
    sp, (parent0, depth0, load0) = grown_trees(g, capacity)
    arcs, tails, heads, cap, in_ptr, in_order = sp.arcs, sp.tails, sp.heads, sp.cap, sp.in_ptr, sp.in_order
    parent = np.repeat(parent0, k, axis=0)
    depth = np.repeat(depth0, k, axis=0)
    load = load0 * k
    _reroute(n, k, tails, heads, cap, in_ptr, in_order, parent, depth, load, int(sweeps))
    used = load > 0
    ratio = load[used] / cap[used]
    i = int(np.argmax(ratio))
    _shallow(n, k, tails, cap, in_ptr, in_order, parent, depth, load, int(load[used][i]), int(cap[used][i]),
             int(sweeps))
    rate = Fraction(k * int(cap[used][i]), int(load[used][i]))
    return rate, np.where(parent >= 0, arcs[np.maximum(parent, 0)], -1), depth


def warm() -> None:
    """Compile (or load from numba's cache) the reroute on a tiny input."""
    from services.synthesis.topology.catalog import build

    rerouted_trees(build("ring(3)"), np.ones(3, np.int64), 1, sweeps=1)
