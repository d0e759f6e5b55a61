"""Maximum flow on small integer-capacity digraphs (Dinic's algorithm, compiled with numba).

The arborescence packing (`packing`) asks hundreds to thousands of max-flow questions on graphs of about
N + a few nodes and N d + 2 N arcs; building a scipy sparse matrix per question costs more than the
flow itself, so the flow works on plain arc arrays. `max_flow(n, tail, head, cap, s, t, limit)` returns the
flow value, stopped as soon as it reaches `limit` (the packing only asks "at least this much?"), and the
nodes reachable from s in the final residual graph: when the value is below `limit` they are the source
side of a minimum s-t cut (max-flow min-cut theorem).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["INF", "max_flow"]

INF = 1 << 55
"""An "infinite" capacity: larger than any cut of a real instance, small enough that sums stay in int64."""


@njit(cache=True, nogil=True)
def _max_flow(n, tail, head, cap, s, t, limit):
    m = tail.size
    start = np.zeros(n + 1, np.int64)
    for i in range(m):
        start[tail[i] + 1] += 1
        start[head[i] + 1] += 1
    for v in range(n):
        start[v + 1] += start[v]
    pos = start[:-1].copy()
    to = np.empty(2 * m, np.int64)
    rc = np.empty(2 * m, np.int64)
    rev = np.empty(2 * m, np.int64)
    for i in range(m):
        a = pos[tail[i]]
        pos[tail[i]] += 1
        b = pos[head[i]]
        pos[head[i]] += 1
        to[a], rc[a], rev[a] = head[i], cap[i], b
        to[b], rc[b], rev[b] = tail[i], 0, a
    level = np.empty(n, np.int64)
    queue = np.empty(n, np.int64)
    it = np.empty(n, np.int64)
    path = np.empty(n, np.int64)
    flow = 0
    while flow < limit:
        level[:] = -1
        level[s] = 0
        queue[0] = s
        qh, qt = 0, 1
        while qh < qt:
            u = queue[qh]
            qh += 1
            for e in range(start[u], start[u + 1]):
                if rc[e] > 0 and level[to[e]] < 0:
                    level[to[e]] = level[u] + 1
                    queue[qt] = to[e]
                    qt += 1
        if level[t] < 0:
            break
        it[:] = start[:-1]
        while flow < limit:                        # augmenting paths of the level graph (blocking flow)
            u, depth, found = s, 0, False
            while True:
                if u == t:
                    found = True
                    break
                advanced = False
                while it[u] < start[u + 1]:
                    e = it[u]
                    v = to[e]
                    if rc[e] > 0 and level[v] == level[u] + 1:
                        path[depth] = e
                        depth += 1
                        u = v
                        advanced = True
                        break
                    it[u] += 1
                if not advanced:
                    if u == s:
                        break
                    level[u] = -1                  # dead end: never entered again in this phase
                    depth -= 1
                    u = to[rev[path[depth]]]
                    it[u] += 1
            if not found:
                break
            f = limit - flow
            for k in range(depth):
                if rc[path[k]] < f:
                    f = rc[path[k]]
            for k in range(depth):
                rc[path[k]] -= f
                rc[rev[path[k]]] += f
            flow += f
    seen = np.zeros(n, np.bool_)                   # source side of a minimum cut (when flow < limit)
    seen[s] = True
    queue[0] = s
    qh, qt = 0, 1
    while qh < qt:
        u = queue[qh]
        qh += 1
        for e in range(start[u], start[u + 1]):
            if rc[e] > 0 and not seen[to[e]]:
                seen[to[e]] = True
                queue[qt] = to[e]
                qt += 1
    return flow, seen


def max_flow(n: int, tail: np.ndarray, head: np.ndarray, cap: np.ndarray, s: int, t: int,
             limit: int = INF) -> tuple[int, np.ndarray]:
    """Max s-t flow (capped at `limit`) of the digraph on nodes 0..n-1 with arcs tail[i] -> head[i] of integer
    capacity cap[i] >= 0; and the nodes reachable from s in the residual graph (a boolean array).

    >>> import numpy as np
    >>> f, side = max_flow(4, np.array([0, 0, 1, 2, 1]), np.array([1, 2, 3, 3, 2]), np.array([3, 2, 1, 5, 4]), 0, 3)
    >>> f, side.tolist()
    (5, [True, False, False, False])
    """
    if s == t:
        raise ValueError("source and sink must differ")
    return _max_flow(int(n), np.ascontiguousarray(tail, np.int64), np.ascontiguousarray(head, np.int64),
                     np.ascontiguousarray(cap, np.int64), int(s), int(t), int(limit))
