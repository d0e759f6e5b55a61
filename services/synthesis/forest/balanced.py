"""The rerouted trees' start (`reroute`): one shortest-path out-tree per root, parents chosen to balance every
arc's load against its bandwidth.

Edmonds' branching theorem made constructive from scratch (`lovasz`, one max flow per tree arc) asks about N^2 max
flows, out of reach at N = 1024; these trees cost O(N (N + arcs)). Here every root r gets a single spanning
out-arborescence of the breadth-first layers of G from r (so its height is r's eccentricity, never more than
D(G): the pipeline stays short). Roots are taken one after another; a node v at distance k from r takes as
its parent the arc (u, v) with u at distance k - 1 whose load after taking it, in trees per unit of capacity
(L_e + 1) / c_e, is smallest (ties: the lighter arc, then the first); then every choice is made again against
all the others, a few sweeps (local search). Every node's N - 1 tree entries are so
spread over its in-arcs roughly in proportion to their bandwidths, as in the cut bound's optimum (`packing`
module docstring), whenever shortest paths offer the choice (on a torus with a few slow arcs, they do).

The rate is what the trees reach, x = min_e c_e / L_e (`packing.pack_trees` gives every tree the weight x's
numerator, so each root's weights sum to it), not necessarily the optimum x* (`packing.optimal_rate`); the
bandwidth term is (M/N) max_e L_e / b_e. O(N (N + arcs)) time, compiled.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numba import njit

from services.synthesis.topology.graph import Topology

__all__ = ["balanced_trees", "PASSES"]

PASSES = 4
"""Sweeps over every (root, node) parent choice: the first builds, the others rebalance."""


@njit(cache=True, nogil=True)
def _bfs(r, n, heads, out_ptr, out_arcs, dist, order):
    dist[:] = -1
    dist[r] = 0
    order[0] = r
    head, tail = 0, 1
    while head < tail:
        u = order[head]
        head += 1
        for i in range(out_ptr[u], out_ptr[u + 1]):
            w = heads[out_arcs[i]]
            if dist[w] < 0:
                dist[w] = dist[u] + 1
                order[tail] = w
                tail += 1
    return tail


@njit(cache=True, nogil=True)
def _choose(v, dist, tails, cap, load, in_ptr, in_arcs):
    """The in-arc of v from the previous layer with the smallest (L + 1) / c, then the smallest L."""
    best, best_num, best_den, best_load = -1, 0, 1, 0
    for i in range(in_ptr[v], in_ptr[v + 1]):
        e = in_arcs[i]
        if dist[tails[e]] != dist[v] - 1:
            continue
        num, den = load[e] + 1, cap[e]
        if best < 0 or num * best_den < best_num * den or \
                (num * best_den == best_num * den and load[e] < best_load):
            best, best_num, best_den, best_load = e, num, den, load[e]
    return best


@njit(cache=True, nogil=True)
def _grow(n, tails, heads, cap, in_ptr, in_arcs, out_ptr, out_arcs, passes):
    """Parent arc and depth of every node in every root's tree; load of every arc (trees using it). The first
    pass grows the trees root after root; each further pass takes every (root, node) choice back and makes it
    again against everyone else's (local search towards each node's balanced assignment: the choices of
    different nodes never constrain each other, any parent one layer up keeps a shortest-path tree)."""
    parent = np.full((n, n), -1, np.int64)
    depth = np.zeros((n, n), np.int64)
    load = np.zeros(tails.size, np.int64)
    dist = np.empty(n, np.int64)
    order = np.empty(n, np.int64)
    for sweep in range(passes):
        for r in range(n):
            if _bfs(r, n, heads, out_ptr, out_arcs, dist, order) < n:
                return parent, depth, load, False
            for k in range(1, n):
                v = order[k]
                if sweep > 0:
                    load[parent[r, v]] -= 1
                best = _choose(v, dist, tails, cap, load, in_ptr, in_arcs)
                parent[r, v] = best
                depth[r, v] = dist[v]
                load[best] += 1
    return parent, depth, load, True


@dataclass(frozen=True)
class SparseArcs:
    """The arcs of positive capacity of a digraph (self-loops dropped), as the compiled tree kernels take them:
    `arcs` their indices in g, tails, heads, integer capacities, and CSR orders by head and by tail."""

    arcs: np.ndarray
    tails: np.ndarray
    heads: np.ndarray
    cap: np.ndarray
    in_ptr: np.ndarray
    in_order: np.ndarray
    out_ptr: np.ndarray
    out_order: np.ndarray


def grown_trees(g: Topology, capacity: np.ndarray) -> tuple[SparseArcs, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The arcs (`SparseArcs`) and one balanced shortest-path out-tree per root on them: (parent, depth, load)
    with parent[r, v] an index into `arcs` (-1 at the root) and load[e] the trees using arc e."""
    n = g.nodes
    arcs = np.flatnonzero((g.tails != g.heads) & (capacity > 0))
    tails = g.tails[arcs].astype(np.int64)
    heads = g.heads[arcs].astype(np.int64)
    sp = SparseArcs(arcs, tails, heads, capacity[arcs].astype(np.int64),
                    np.concatenate([[0], np.cumsum(np.bincount(heads, minlength=n))]).astype(np.int64),
                    np.argsort(heads, kind="stable").astype(np.int64),
                    np.concatenate([[0], np.cumsum(np.bincount(tails, minlength=n))]).astype(np.int64),
                    np.argsort(tails, kind="stable").astype(np.int64))
    parent, depth, load, ok = _grow(n, sp.tails, sp.heads, sp.cap, sp.in_ptr, sp.in_order, sp.out_ptr, sp.out_order,
                                    PASSES)
    if not ok:
        raise ValueError(f"{g.expr}: some node cannot be reached over arcs of positive capacity")
    return sp, (parent, depth, load)


def balanced_trees(g: Topology, capacity: np.ndarray) -> tuple[Fraction, np.ndarray, np.ndarray]:
    """One balanced shortest-path out-tree per root on integer arc capacities (`packing.integer_capacities`;
    see the module docstring): (rate x = min_e c_e / L_e, parent_arc[r, v] the arc of g into v in r's tree or
    -1 at the root, depth[r, v]).

    >>> from services.synthesis.topology.catalog import build
    >>> rate, parent, depth = balanced_trees(build("ring(4)"), np.ones(4, np.int64))
    >>> rate, parent[0].tolist(), depth[0].tolist()
    (Fraction(1, 3), [-1, 0, 1, 2], [0, 1, 2, 3])
    """
    sp, (parent, depth, load) = grown_trees(g, capacity)
    arcs, cap = sp.arcs, sp.cap
    used = load > 0
    ratio = cap[used] / load[used]
    k = int(np.argmin(ratio))
    rate = Fraction(int(cap[used][k]), int(load[used][k]))
    return rate, np.where(parent >= 0, arcs[np.maximum(parent, 0)], -1), depth


def warm() -> None:
    """Compile (or load from numba's cache) the tree growth on a tiny input."""
    z = np.array([0, 1], np.int64)
    _grow(2, z, z[::-1].copy(), np.ones(2, np.int64), np.array([0, 1, 2], np.int64), np.array([1, 0], np.int64),
          np.array([0, 1, 2], np.int64), z, 2)
