"""An exact packing from nearly exact trees: keep what fits x*, pack the rest by Lovasz's construction.

The rerouted trees (`reroute`: K trees of weight 1 per root) usually miss x* = p/q only by integrality: on
torus(32, 32) with one 5 Gbps in-arc at a node (others 25 Gbps), x* = 16/1023 asks that node's 1023 tree entries
be split exactly 5:5:5:1, which trees of weight 1 cannot do. Trees of unequal integer weights can.

Weights. Every root's trees weigh W = lcm(K, p) in total, each rerouted tree W/K; arc e may carry trees of total
weight B_e = (W/x*) c_e = (W/p) q c_e (an integer), so trees reaching that are a packing of rate exactly x*.

Repair.
1. Arcs over B_e: drop rerouted trees using them (trees of roots that already lost one first, so few roots are
   rebuilt) until every arc fits.
2. Root r now lacks d_r = W - (its kept trees' weight); the kept trees leave residual capacities B_e - L_e. The
   missing trees exist iff Edmonds' condition (E) of `lovasz` holds on the residual: for every v, the max flow from
   a super source (s -> r of capacity d_r) to v is at least sum d_r (`feasible_set`, N max flows). Where it fails
   at a set S, a kept tree is wasteful on S: it enters S more than once (root outside S) or at all (root inside);
   with no wasteful tree (E) holds on S, since B(delta_in S) >= W (N - |S|) (x* is the minimum ratio) and each
   kept tree of a root outside S then uses exactly one entry of it. So dropping S's wasteful trees fixes S, and
   dropping a tree never breaks another set (its root's demand grows by its weight, the residual of every set it
   enters by at least as much); the loop ends, at worst with every tree dropped (Lovasz's construction alone).
3. Lovasz's construction (`lovasz.grow_trees`) packs the demands on the residual capacities.

The result reaches x* exactly on every graph; its cost is the N max flows of each check plus about N max flows
per rebuilt tree, and the kept trees stay the rerouted ones (shallow: the pipeline's depth).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from services.synthesis.forest.flow import max_flow
from services.synthesis.forest.lovasz import grow_trees
from services.synthesis.topology.graph import Topology

__all__ = ["Repaired", "repaired_trees", "feasible_set"]


@dataclass
class Repaired:
    """Trees of rate x*: per root weights summing to `weight_sum` (W); rows of `parent` / `depth` (arc of g into
    each node, -1 at the root) with `root` and `weight`; `rebuilt` trees came from Lovasz's construction."""

    weight_sum: int
    root: np.ndarray
    weight: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    rebuilt: int
    dropped: int
    flows: int


def feasible_set(n: int, tails: np.ndarray, heads: np.ndarray, residual: np.ndarray,
                 demand: np.ndarray) -> tuple[np.ndarray | None, int]:
    """A nonempty node set S violating (E) (`lovasz`) on the residual capacities, as a boolean mask, or None when
    (E) holds; and the max flows computed (one per node until a violation)."""
    total = int(demand.sum())
    if total == 0:
        return None, 0
    roots = np.flatnonzero(demand > 0)
    use = residual > 0
    t = np.concatenate([tails[use], np.full(roots.size, n)]).astype(np.int64)
    h = np.concatenate([heads[use], roots]).astype(np.int64)
    c = np.concatenate([residual[use], demand[roots]]).astype(np.int64)
    for v in range(n):
        f, side = max_flow(n + 1, t, h, c, n, v, total)
        if f < total:
            return ~side[:n], v + 1
    return None, n


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
    trees = parent.shape[0]
    owner = np.repeat(np.arange(n), k)
    kept = np.ones(trees, bool)
    tails, heads = g.tails.astype(np.int64), g.heads.astype(np.int64)
    load = np.bincount(parent[parent >= 0], minlength=g.arcs).astype(np.int64) * w
    touched = np.zeros(n, bool)

    def drop(rows: np.ndarray) -> None:
        for t in rows:
            arcs = parent[t][parent[t] >= 0]
            np.subtract.at(load, arcs, w)
            kept[t] = False
            touched[owner[t]] = True

    for e in np.flatnonzero(load > bound):                    # 1. every arc within B_e
        if load[e] <= bound[e]:
            continue
        users = np.flatnonzero(kept & (parent[:, heads[e]] == e))
        users = users[np.argsort(~touched[owner[users]], kind="stable")]
        need = -(-int(load[e] - bound[e]) // w)                # ceil(excess / w) trees
        drop(users[:need])
    flows = 0
    while True:                                               # 2. (E) on the residual
        demand = big - np.bincount(owner[kept], minlength=n).astype(np.int64) * w
        bad, used = feasible_set(n, tails, heads, bound - load, demand)
        flows += used
        if bad is None:
            break
        rows = np.flatnonzero(kept)
        inner = parent[np.ix_(rows, np.flatnonzero(bad))]
        entries = ((inner >= 0) & ~bad[tails[np.maximum(inner, 0)]]).sum(axis=1)
        wasteful = rows[(entries >= 2) | ((entries >= 1) & bad[owner[rows]])]
        if wasteful.size == 0:
            raise RuntimeError(f"{g.expr}: Edmonds' condition fails with no wasteful tree (a bug)")
        drop(wasteful)
    sparse = np.flatnonzero(usable)                           # 3. Lovasz's construction on what is left
    residual = (bound - load)[sparse]
    root, mu, sp_parent, sp_depth, built = grow_trees(n, tails[sparse], heads[sparse], residual, demand)
    flows += built
    rows = np.flatnonzero(kept)
    return Repaired(big, np.concatenate([owner[rows], root]), np.concatenate([np.full(rows.size, w), mu]),
                    np.concatenate([parent[rows], np.where(sp_parent >= 0, sparse[np.maximum(sp_parent, 0)], -1)]),
                    np.concatenate([depth[rows], sp_depth]), int(root.size), int(trees - rows.size), flows)
