"""Lovasz's constructive proof of Edmonds' branching theorem (Lovasz 1976), compiled: partial arborescences
grown one arc at a time, each arc checked by one max flow.

Instance. A digraph with integer residual capacities cap_e and partial trees i: out-arborescences of weight mu_i
spanning a node set R_i (their root sets; a root alone is a tree not begun). Edmonds' theorem: they extend to
spanning out-arborescences, tree i's weight split among its extensions, using arc e at most cap_e times in total,
iff for every nonempty node set S

    cap(delta_in S) >= sum of mu_i over the trees i with R_i disjoint from S.                       (E)

(`packing` reaches the cut bound with p trees of every root begun at the root on capacities q c_e, where (E) is
x* <= c(delta_in S) / (N - |S|); `repair` regrows what it cut off its kept trees on the residual capacities.)

Step. The trees are completed in turn; a partial tree g of weight mu spanning U takes an arc (u, w), u in U, w not
in U, with weight mu' when no set S with w in S, u not in S, S meeting U has slack
cap(delta_in S) - sum{mu_j : R_j disjoint from S} below mu' (over the other unfinished trees j). The largest such
mu' is one max flow in the auxiliary graph (node a_j per unfinished tree, s -> a_j of capacity mu_j, a_j -> v for
v in R_j) from {s, u} to {w, a_g}, minus the total weight K of unfinished trees (`aux_flow`; a tree already
spanning w, g among them, sends its weight to w straight, so only the trees missing w enter the graph); when it
is below mu the tree is split (the rest continues from the same partial tree later), so weights stay integral and
few distinct trees are made. A blocked arc's tight set blocks every arc entering it from U for good (slacks only
shrink while a tree grows), so those are skipped without another flow. Arcs are tried shallowest tail first,
widest first.

Cost: one max flow (Dinic, `flow`) per arc attempt, on the arcs of positive residual capacity plus an arc
a_j -> v per node of every unfinished tree missing w: about one per node to grow, so cheap when little is missing
(`repair`), about N^2 flows when every tree starts at its root.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from services.synthesis.forest.flow import INF, _max_flow

__all__ = ["grow_trees", "aux_flow"]


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
def aux_flow(n, tails, heads, cap, inside, mu, act, nact, u, w, limit, t, h, c):
    """Max flow (up to `limit`) from s (and from u, when u >= 0) to w in the auxiliary graph of (E): G with the
    residual capacities and s -> a_i -> R_i for the unfinished trees (rows act[0 .. nact-1] of `inside`, weights
    `mu`); s = n. A tree already spanning w sends its weight straight to w (s -> a_i -> w: some maximum flow does
    so), so only the others enter the graph: a_i = n + 1 + i for the i-th of them. Returns (value, the residual
    graph's source side: its complement a minimum cut's sink side when the value is below `limit`). t, h, c:
    scratch arrays of at least the arcs + the trees + their nodes + 1."""
    direct = 0
    i = 0
    for e in range(tails.size):
        if cap[e] > 0:
            t[i], h[i], c[i] = tails[e], heads[e], cap[e]
            i += 1
    k = 0
    for j in range(nact):
        row = act[j]
        if inside[row, w]:
            direct += mu[row]
            continue
        t[i], h[i], c[i] = n, n + 1 + k, mu[row]
        i += 1
        for v in range(n):
            if inside[row, v]:
                t[i], h[i], c[i] = n + 1 + k, v, INF
                i += 1
        k += 1
    if u >= 0:
        t[i], h[i], c[i] = n, u, INF
        i += 1
    if direct >= limit:
        side = np.zeros(n + 1 + k, np.bool_)
        side[n] = True
        return direct, side
    f, side = _max_flow(n + 1 + k, t[:i], h[:i], c[:i], n, w, limit - direct)
    return f + direct, side


@njit(cache=True, nogil=True)
def _grow(n, tails, heads, cap, inside0, parent0, depth0, mu0):
    m = tails.size
    k0 = mu0.size
    extra = 1
    total = 0
    for j in range(k0):
        extra = max(extra, mu0[j])
        total += mu0[j]
    rows = k0 + extra                          # the initial trees, then the split pieces of the current one
    inside = np.zeros((rows, n), np.bool_)
    parent = np.full((rows, n), -1, np.int64)
    depth = np.zeros((rows, n), np.int64)
    inside[:k0] = inside0
    parent[:k0] = parent0
    depth[:k0] = depth0
    blocked = np.zeros((rows, m), np.bool_)
    mu = np.zeros(rows, np.int64)
    mu[:k0] = mu0
    size = np.zeros(rows, np.int64)
    for j in range(k0):
        size[j] = inside0[j].sum()
    stack = np.empty(extra, np.int64)
    act = np.empty(rows, np.int64)
    room = 16
    out_from = np.empty(room, np.int64)
    out_mu = np.empty(room, np.int64)
    out_parent = np.empty((room, n), np.int64)
    out_depth = np.empty((room, n), np.int64)
    count, flows = 0, 0
    cells = m + rows + rows * n + 1
    t = np.empty(cells, np.int64)
    h = np.empty(cells, np.int64)
    c = np.empty(cells, np.int64)
    for j0 in range(k0):
        stack[0] = j0
        top = 1
        while top > 0:
            j = stack[top - 1]
            while size[j] < n:
                e = _next_arc(tails, heads, cap, inside[j], depth[j], blocked[j])
                if e < 0:
                    return out_from[:count], out_mu[:count], out_parent[:count], out_depth[:count], flows, False
                u, w = tails[e], heads[e]
                want = min(mu[j], cap[e])
                nact = 0
                for i in range(j0 + 1, k0):    # unfinished: the later initial trees, the current one's pieces
                    act[nact] = i
                    nact += 1
                for i in range(top):           # g (the tree taking u -> w) last: a_g is on w's side,
                    act[nact] = stack[i]       # so its weight reaches w straight (as a tree spanning w)
                    nact += 1
                inside[j, w] = True
                f, side = aux_flow(n, tails, heads, cap, inside, mu, act, nact, u, w, total + want, t, h, c)
                inside[j, w] = False
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
                    k = k0 + top - 1
                    inside[k, :] = inside[j]
                    parent[k, :] = parent[j]
                    depth[k, :] = depth[j]
                    blocked[k, :] = blocked[j]
                    size[k] = size[j]
                    mu[k] = take
                    mu[j] -= take
                    stack[top] = k
                    top += 1
                    j = k
                cap[e] -= take
                inside[j, w] = True
                parent[j, w] = e
                depth[j, w] = depth[j, u] + 1
                size[j] += 1
            if count == room:
                room *= 2
                grown_from = np.empty(room, np.int64)
                grown_mu = np.empty(room, np.int64)
                grown_parent = np.empty((room, n), np.int64)
                grown_depth = np.empty((room, n), np.int64)
                grown_from[:count] = out_from[:count]
                grown_mu[:count] = out_mu[:count]
                grown_parent[:count] = out_parent[:count]
                grown_depth[:count] = out_depth[:count]
                out_from, out_mu, out_parent, out_depth = grown_from, grown_mu, grown_parent, grown_depth
            out_from[count], out_mu[count] = j0, mu[j]
            out_parent[count] = parent[j]
            out_depth[count] = depth[j]
            count += 1
            total -= mu[j]
            top -= 1
    return out_from[:count], out_mu[:count], out_parent[:count], out_depth[:count], flows, True


def grow_trees(n: int, tails: np.ndarray, heads: np.ndarray, cap: np.ndarray, inside: np.ndarray,
               parent: np.ndarray, depth: np.ndarray, weight: np.ndarray):
    """Complete the partial trees (row i: the nodes `inside[i]` it spans, parent[i, v] an index into the arc
    arrays or -1 at its root and outside it, depth[i, v], weight[i]) into spanning out-arborescences on arcs
    tails[e] -> heads[e] of residual capacity cap[e] (updated in place); (E) (module docstring, a tree's root set
    R_i being its nodes) guarantees success. Returns (the row each tree grew from, its weight, parent, depth, max
    flows computed), the weights of one row's trees summing to its weight; or None when no arc can extend a tree
    (then (E) fails: `repair.violated_set` finds a set).

    >>> import numpy as np
    >>> inside = np.array([[True, False, False], [False, True, False]])
    >>> done = grow_trees(3, np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([2, 2, 2]), inside,
    ...                   np.full((2, 3), -1), np.zeros((2, 3), int), np.array([1, 1]))
    >>> done[0].tolist(), done[1].tolist(), done[2].tolist()
    ([0, 1], [1, 1], [[-1, 0, 1], [2, -1, 1]])
    """
    n = int(n)
    weight = np.ascontiguousarray(weight, np.int64)
    k = weight.size
    if inside.shape != (k, n) or parent.shape != (k, n) or depth.shape != (k, n) or (weight < 1).any():
        raise ValueError("need one row of n nodes, parents and depths and a positive weight per partial tree")
    got = _grow(n, np.ascontiguousarray(tails, np.int64), np.ascontiguousarray(heads, np.int64), cap,
                np.ascontiguousarray(inside, np.bool_), np.ascontiguousarray(parent, np.int64),
                np.ascontiguousarray(depth, np.int64), weight)
    return got[:5] if got[5] else None


def warm() -> None:
    """Compile (or load from numba's cache) the construction on a tiny input."""
    grow_trees(3, np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([2, 2, 2], np.int64),
               np.array([[True, False, False], [False, True, False]]), np.full((2, 3), -1, np.int64),
               np.zeros((2, 3), np.int64), np.array([1, 1]))
