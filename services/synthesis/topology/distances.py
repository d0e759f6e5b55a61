"""Breadth-first distances and balls on a graph given as next-hop rows (compiled with numba): the graph
algorithms behind `Topology.distances`, its diameter and its balls (services.synthesis.topology.graph).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["bfs_distances", "grow_balls"]


@njit(cache=True, nogil=True)
def bfs_distances(sources: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """dist[i, x] = number of hops from sources[i] to x following nxt (N, d) (-1 if unreachable)."""
    n, d = nxt.shape
    out = np.full((sources.size, n), -1, dtype=np.int32)
    queue = np.empty(n, dtype=np.int64)
    for i in range(sources.size):
        dist = out[i]
        dist[sources[i]] = 0
        queue[0] = sources[i]
        head, tail = 0, 1
        while head < tail:
            x = queue[head]
            head += 1
            step = dist[x] + 1
            for k in range(d):
                y = nxt[x, k]
                if dist[y] < 0:
                    dist[y] = step
                    queue[tail] = y
                    tail += 1
    return out


@njit(cache=True, nogil=True)
def grow_balls(ball: np.ndarray, nxt: np.ndarray):
    """One breadth-first step for every node at once: row x of the result is ball[x] united with ball[y] for
    each of x's neighbours y = nxt[x, k] (bitset rows). Returns (grown, whether anything changed)."""
    n, words = ball.shape
    grown = ball.copy()
    changed = False
    for x in range(n):
        for k in range(nxt.shape[1]):
            y = nxt[x, k]
            for j in range(words):
                grown[x, j] |= ball[y, j]
        if not changed:
            for j in range(words):
                if grown[x, j] != ball[x, j]:
                    changed = True
                    break
    return grown, changed
