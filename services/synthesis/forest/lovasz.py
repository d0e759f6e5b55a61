"""Lovasz's constructive proof of Edmonds' branching theorem (Lovasz 1976), compiled: arborescences grown one arc
at a time, each arc checked by one max flow.

Instance. A digraph with integer residual capacities cap_e and, per root r, a demand d_r: the weight of spanning
out-arborescences of r still to be packed. Edmonds' theorem: trees of root r with weights summing to d_r, using
arc e at most cap_e times in total, exist iff for every nonempty node set S

    cap(delta_in S) >= sum of d_r over roots r outside S.                                        (E)

(`packing` reaches the cut bound with d_r = p on capacities q c_e, where (E) is x* <= c(delta_in S) / (N - |S|);
`repair` packs only what its kept trees leave: (E) on the residual capacities, checked by `feasible_set`.)

Step. Roots are taken in turn; a partial tree of multiplicity mu with vertex set U (its root set R_g) takes an arc
(u, w), u in U, w not in U, with multiplicity mu' when no set S with w in S, u not in S, S meeting U has slack
cap(delta_in S) - #{j : R_j disjoint from S} below mu' (the R_j are the other partial trees' vertex sets and the
unstarted roots, each counted with its weight). The largest such mu' is one max flow in the auxiliary graph (node
a_j per partial tree, s -> a_j of capacity mu_j, a_j -> v for v in R_j, s -> r of capacity d_r for unstarted
roots) from {s, u} to {w, a_g}, minus the total weight K of unfinished trees; when it is below mu the tree is split
(the rest continues from the same partial tree later), so weights stay integral and few distinct trees are made.
A blocked arc's tight set blocks every arc entering it from U for good (slacks only shrink while a tree grows),
so those are skipped without another flow. Arcs are tried shallowest tail first, widest first.

Cost: one max flow (Dinic, `flow`) per arc attempt on a graph of N + 1 + k nodes (k partial trees of the current
root) and the arcs of positive residual capacity: about N arc attempts per tree, so the construction is cheap for a
few roots (`repair`) and about N^2 flows for all of them.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from services.synthesis.forest.flow import INF, _max_flow

__all__ = ["grow_trees"]


@njit(cache=True, nogil=True)
def _next_arc(tails, heads, cap, inside, depth, blocked):
    """The arc leaving the tree with the shallowest tail, widest residual capacity first; -1 if none."""
    best, bd, bc = -1, 0, 0
    for e in range(tails.size):
        if cap[e] > 0 and inside[tails[e]] and not inside[heads[e]] and not blocked[e]:
            d = depth[tails[e]]
            if best < 0 or d < bd or (d == bd and cap[e] > bc):
                best, bd, bc = e, d, cap[e]
    return best


@njit(cache=True, nogil=True)
def _check(n, tails, heads, cap, unstarted, inside, mu, k, u, w, limit, t, h, c):
    """Max flow (up to `limit`) from {s, u} to {w, a_g} in the auxiliary graph of (E): G with the residual
    capacities, s -> r for roots not begun, s -> a_j -> R_j for the k partial trees (rows 0..k-1 of `inside`;
    the last is g, the tree taking u -> w); s = n, a_j = n + 1 + j. t, h, c: scratch arrays."""
    i = 0
    for e in range(tails.size):
        if cap[e] > 0:
            t[i], h[i], c[i] = tails[e], heads[e], cap[e]
            i += 1
    for r in range(n):
        if unstarted[r] > 0:
            t[i], h[i], c[i] = n, r, unstarted[r]
            i += 1
    for j in range(k):
        t[i], h[i], c[i] = n, n + 1 + j, mu[j]
        i += 1
        for v in range(n):
            if inside[j, v]:
                t[i], h[i], c[i] = n + 1 + j, v, INF
                i += 1
    t[i], h[i], c[i] = n, u, INF
    i += 1
    t[i], h[i], c[i] = n + k, w, INF
    i += 1
    return _max_flow(n + 1 + k, t[:i], h[:i], c[:i], n, w, limit)


@njit(cache=True, nogil=True)
def _grow(n, tails, heads, cap, demand):
    m = tails.size
    unstarted = demand.copy()
    total = 0
    rows = 1
    for r in range(n):
        total += demand[r]
        rows = max(rows, demand[r])
    inside = np.zeros((rows, n), np.bool_)
    parent = np.full((rows, n), -1, np.int64)
    depth = np.zeros((rows, n), np.int64)
    blocked = np.zeros((rows, m), np.bool_)
    mu = np.zeros(rows, np.int64)
    size = np.zeros(rows, np.int64)
    room = 16
    out_root = np.empty(room, np.int64)
    out_mu = np.empty(room, np.int64)
    out_parent = np.empty((room, n), np.int64)
    out_depth = np.empty((room, n), np.int64)
    count, flows = 0, 0
    cells = m + 2 * n + rows + rows * n + 2
    t = np.empty(cells, np.int64)
    h = np.empty(cells, np.int64)
    c = np.empty(cells, np.int64)
    for r in range(n):
        if unstarted[r] == 0:
            continue
        k = 1
        mu[0], unstarted[r] = unstarted[r], 0
        inside[0, :] = False
        inside[0, r] = True
        parent[0, :] = -1
        depth[0, :] = 0
        blocked[0, :] = False
        size[0] = 1
        while k > 0:
            j = k - 1
            while size[j] < n:
                e = _next_arc(tails, heads, cap, inside[j], depth[j], blocked[j])
                if e < 0:
                    return out_root[:count], out_mu[:count], out_parent[:count], out_depth[:count], flows, False
                u, w = tails[e], heads[e]
                want = min(mu[j], cap[e])
                f, side = _check(n, tails, heads, cap, unstarted, inside, mu, k, u, w, total + want, t, h, c)
                flows += 1
                slack = f - total
                if slack <= 0:                 # the sink side is a tight set: arcs from U into it never fit
                    for a in range(m):
                        if inside[j, tails[a]] and side[tails[a]] and not side[heads[a]] and not inside[j, heads[a]]:
                            blocked[j, a] = True
                    blocked[j, e] = True
                    continue
                take = min(want, slack)
                if take < mu[j]:               # split: the rest (mu - take) stays below, the top takes the arc
                    inside[k, :] = inside[j]
                    parent[k, :] = parent[j]
                    depth[k, :] = depth[j]
                    blocked[k, :] = blocked[j]
                    size[k] = size[j]
                    mu[k] = take
                    mu[j] -= take
                    j = k
                    k += 1
                cap[e] -= take
                inside[j, w] = True
                parent[j, w] = e
                depth[j, w] = depth[j, u] + 1
                size[j] += 1
            if count == room:
                room *= 2
                grown_root = np.empty(room, np.int64)
                grown_mu = np.empty(room, np.int64)
                grown_parent = np.empty((room, n), np.int64)
                grown_depth = np.empty((room, n), np.int64)
                grown_root[:count] = out_root[:count]
                grown_mu[:count] = out_mu[:count]
                grown_parent[:count] = out_parent[:count]
                grown_depth[:count] = out_depth[:count]
                out_root, out_mu, out_parent, out_depth = grown_root, grown_mu, grown_parent, grown_depth
            out_root[count], out_mu[count] = r, mu[j]
            out_parent[count] = parent[j]
            out_depth[count] = depth[j]
            count += 1
            total -= mu[j]
            k -= 1
    return out_root[:count], out_mu[:count], out_parent[:count], out_depth[:count], flows, True


def grow_trees(n: int, tails: np.ndarray, heads: np.ndarray, cap: np.ndarray, demand: np.ndarray):
    """Spanning out-arborescences of weights summing to demand[r] for every root r on arcs tails[e] -> heads[e] of
    residual capacity cap[e] (updated in place), which must satisfy (E) (module docstring): (root, weight,
    parent[i, v] an index into the arc arrays or -1 at the root, depth[i, v], max flows computed).

    >>> import numpy as np
    >>> root, mu, parent, depth, flows = grow_trees(3, np.array([0, 1, 2]), np.array([1, 2, 0]),
    ...                                             np.array([2, 2, 2]), np.array([1, 1, 0]))
    >>> root.tolist(), mu.tolist(), parent.tolist()
    ([0, 1], [1, 1], [[-1, 0, 1], [2, -1, 1]])
    """
    demand = np.ascontiguousarray(demand, np.int64)
    if demand.shape != (n,) or (demand < 0).any():
        raise ValueError("need one nonnegative demand per node")
    root, mu, parent, depth, flows, ok = _grow(int(n), np.ascontiguousarray(tails, np.int64),
                                               np.ascontiguousarray(heads, np.int64), cap, demand)
    if not ok:
        raise RuntimeError("no arc can extend a tree: the capacities violate Edmonds' condition (E)")
    return root, mu, parent, depth, flows


def warm() -> None:
    """Compile (or load from numba's cache) the construction on a tiny input."""
    grow_trees(3, np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([2, 2, 2], np.int64), np.array([1, 1, 0]))
