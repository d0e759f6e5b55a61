"""An exact packing from nearly exact trees: keep what fits x*, cut the rest off and regrow it by Lovasz's
construction.

The rerouted trees (`reroute`: K trees of weight 1 per root) usually miss x* = p/q only by integrality: on
torus(32, 32) with one 5 Gbps in-arc at a node (others 25 Gbps), x* = 16/1023 asks that node's 1023 tree entries
be split exactly 5:5:5:1, which trees of weight 1 cannot do. Trees of unequal integer weights can.

Weights. Every root's trees weigh W = lcm(K, p) in total, each rerouted tree W/K; arc e may carry trees of total
weight B_e = (W/x*) c_e = (W/p) q c_e (an integer), so trees within that are a packing of rate exactly x*.

Repair.
1. An arc e = (u, v) over B_e: cut the subtree of v off trees using e (smallest subtrees first, often v alone)
   until e fits. A cut tree is a partial tree: its root set R is what is left of it.
2. Lovasz's construction (`lovasz.grow_trees`) regrows the partial trees on the residual capacities B_e - L_e,
   splitting them where an arc has less room than their weight. It succeeds iff Edmonds' condition (E) of `lovasz`
   holds: for every nonempty S, the residual capacity entering S is at least the weight of the partial trees
   disjoint from S. Where it fails, `violated_set` (N max flows) finds such an S, and a tree is wasteful on S: it
   enters S more than once (root outside S) or at all (root inside). With no wasteful tree (E) holds on S, since
   B(delta_in S) >= W (N - |S|) (x* is the minimum ratio) and each tree of a root outside S that meets S then
   uses exactly one entry of it. So cutting every entry of a wasteful tree but its shallowest (every entry, root
   inside S) fixes S; and cutting never breaks another set (when the cut makes a tree disjoint from a set, the
   tree's entry into the set was on the arcs it freed). The loop ends, at worst with every tree cut to its root
   (Lovasz's construction from scratch), and then regrows.

The result reaches x* exactly on every graph; its cost is one max flow per regrown arc (on the residual graph
plus an arc a_i -> v per unfinished tree i and node v of it), and N max flows per failed attempt. The trees that
were not cut stay the rerouted ones (shallow: the pipeline's depth), and the regrown parts hang from the
shallowest nodes that have room.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numba import njit

from services.synthesis.forest.lovasz import aux_flow, grow_trees
from services.synthesis.topology.graph import Topology

__all__ = ["Repaired", "repaired_trees", "violated_set"]


@dataclass
class Repaired:
    """Trees of rate x*: per root weights summing to `weight_sum` (W); rows of `parent` / `depth` (arc of g into
    each node, -1 at the root) with `root` and `weight`; `cut` rerouted trees were cut, `regrown` nodes regrown
    into `rebuilt` trees by Lovasz's construction; `scratch` when every tree was cut to its root."""

    weight_sum: int
    root: np.ndarray
    weight: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    cut: int
    regrown: int
    rebuilt: int
    flows: int
    scratch: bool


@njit(cache=True, nogil=True)
def _sizes(parent, depth, tails, sizes):
    """sizes[t, v]: the nodes of tree t below v, v included (0 outside the tree), for every row t of parent."""
    for t in range(parent.shape[0]):
        sizes[t, :] = 0
        order = np.argsort(depth[t], kind="mergesort")
        for i in range(order.size - 1, -1, -1):            # deepest first: children before their parent
            x = order[i]
            if parent[t, x] >= 0:
                sizes[t, x] += 1
                sizes[t, tails[parent[t, x]]] += sizes[t, x]
            elif depth[t, x] == 0:                           # the root (nodes cut off have depth -1)
                sizes[t, x] += 1


@njit(cache=True, nogil=True)
def _subtree(parent, depth, tails, v):
    """The nodes of a (partial) tree below v, v included (parent[x] the arc into x, -1 at the root or outside)."""
    below = np.zeros(parent.size, np.bool_)
    below[v] = True
    for x in np.argsort(depth, kind="mergesort"):
        if x != v and parent[x] >= 0 and below[tails[parent[x]]]:
            below[x] = True
    return below


@njit(cache=True, nogil=True)
def _violated(n, tails, heads, residual, inside, weight):
    k = weight.size
    total = weight.sum()
    act = np.arange(k)
    cells = tails.size + k + k * n + 1
    t = np.empty(cells, np.int64)
    h = np.empty(cells, np.int64)
    c = np.empty(cells, np.int64)
    for v in range(n):
        f, side = aux_flow(n, tails, heads, residual, inside, weight, act, k, -1, v, total, t, h, c)
        if f < total:
            return v, ~side[:n]
    return -1, np.zeros(n, np.bool_)


def violated_set(n: int, tails: np.ndarray, heads: np.ndarray, residual: np.ndarray, inside: np.ndarray,
                 weight: np.ndarray) -> tuple[np.ndarray | None, int]:
    """A nonempty node set S violating (E) (`lovasz`) for partial trees (rows of `inside`, weights) on the residual
    capacities, as a boolean mask, or None when (E) holds; and the max flows computed: for each v, the flow from s
    (s -> a_i of capacity weight[i], a_i -> every node of tree i) to v is at least the total weight iff (E) holds
    on every set containing v (a minimum cut's sink side is such a set; `lovasz.aux_flow`)."""
    if weight.size == 0:
        return None, 0
    v, bad = _violated(int(n), np.ascontiguousarray(tails, np.int64), np.ascontiguousarray(heads, np.int64),
                       np.ascontiguousarray(residual, np.int64), np.ascontiguousarray(inside, np.bool_),
                       np.ascontiguousarray(weight, np.int64))
    return (None, n) if v < 0 else (bad, v + 1)


def repaired_trees(g: Topology, capacity: np.ndarray, optimum: Fraction, k: int, parent: np.ndarray,
                   depth: np.ndarray) -> Repaired:
    """Trees of rate exactly `optimum` (x*) from the rerouted ones (`parent[r k + j]`, `depth[r k + j]`: root r's
    j-th tree, arcs of g) on integer capacities (see the module docstring)."""
    n = g.nodes
    p, q = optimum.numerator, optimum.denominator
    big = math.lcm(k, p)
    w = big // k
    usable = (g.tails != g.heads) & (capacity > 0)
    bound = np.where(usable, capacity, 0).astype(np.int64) * (big // p * q)
    parent, depth = parent.copy(), depth.copy()
    owner = np.repeat(np.arange(n), k)
    cut = np.zeros(parent.shape[0], bool)
    tails, heads = g.tails.astype(np.int64), g.heads.astype(np.int64)
    load = np.bincount(parent[parent >= 0], minlength=g.arcs).astype(np.int64) * w

    def prune(t: int, v: int) -> None:
        below = _subtree(parent[t], depth[t], tails, v)
        np.subtract.at(load, parent[t, below], w)
        parent[t, below] = -1
        depth[t, below] = -1                                  # outside the tree
        cut[t] = True

    over = np.flatnonzero(load > bound)
    if over.size:
        sizes = np.zeros(parent.shape, np.int64)
        _sizes(parent, depth, tails, sizes)
    for e in over:                                            # 1. every arc within B_e
        if load[e] <= bound[e]:
            continue
        v = int(heads[e])
        users = np.flatnonzero(parent[:, v] == e)
        for t in users[np.argsort(sizes[users, v], kind="stable")][:-(-int(load[e] - bound[e]) // w)]:
            prune(int(t), v)
            _sizes(parent[t:t + 1], depth[t:t + 1], tails, sizes[t:t + 1])
    sparse = np.flatnonzero(usable)                           # 2. regrow; cut more where (E) fails
    index = np.full(g.arcs, -1, np.int64)
    index[sparse] = np.arange(sparse.size)
    flows = 0
    while True:
        rows = np.flatnonzero(cut)
        inside = parent[rows] >= 0
        inside[np.arange(rows.size), owner[rows]] = True
        residual = (bound - load)[sparse]
        done = grow_trees(n, tails[sparse], heads[sparse], residual.copy(), inside,
                          np.where(parent[rows] >= 0, index[np.maximum(parent[rows], 0)], -1), depth[rows],
                          np.full(rows.size, w))
        if done is not None:
            break
        bad, used = violated_set(n, tails[sparse], heads[sparse], residual, inside, np.full(rows.size, w))
        flows += used
        if bad is None:
            raise RuntimeError(f"{g.expr}: Lovasz's construction stopped although Edmonds' condition holds (a bug)")
        wasteful = 0
        for t in range(parent.shape[0]):
            into = np.flatnonzero(bad & (parent[t] >= 0))
            into = into[~bad[tails[parent[t, into]]]]          # the tree's entries into S
            into = into[np.argsort(depth[t, into], kind="stable")][0 if bad[owner[t]] else 1:]
            for v in into:
                if parent[t, v] >= 0:                           # not already cut off with an earlier entry
                    prune(t, int(v))
                    wasteful += 1
        if wasteful == 0:
            raise RuntimeError(f"{g.expr}: Edmonds' condition fails with no wasteful tree (a bug)")
    origin, mu, grown, grown_depth, built = done
    flows += built
    rows = np.flatnonzero(cut)
    whole = np.flatnonzero(~cut)
    return Repaired(big, np.concatenate([owner[whole], owner[rows[origin]]]),
                    np.concatenate([np.full(whole.size, w), mu]),
                    np.concatenate([parent[whole], np.where(grown >= 0, sparse[np.maximum(grown, 0)], -1)]),
                    np.concatenate([depth[whole], grown_depth]), int(rows.size),
                    int((inside.shape[1] - inside.sum(axis=1)).sum()), int(origin.size), flows,
                    bool(rows.size == parent.shape[0] and not (parent >= 0).any()))
