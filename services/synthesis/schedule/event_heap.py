"""A binary min-heap of (time, index) pairs in two preallocated arrays, compiled: the event queue of the
event-driven schedulers (TACOS's link-free events, `bfb.greedy`; a tree packing run piece by piece,
`forest.stream`). Ties on time pop the smaller index first, so a run is deterministic."""
from __future__ import annotations

from numba import njit

__all__ = ["heap_push", "heap_pop"]


@njit(cache=True, nogil=True)
def heap_push(ht, ha, size, t, a):
    """Insert (t, a) into the heap of `size` entries held in ht (times) and ha (indices); returns the new size."""
    i = size
    ht[i], ha[i] = t, a
    while i > 0:
        p = (i - 1) >> 1
        if ht[p] < ht[i] or (ht[p] == ht[i] and ha[p] <= ha[i]):
            break
        ht[p], ht[i] = ht[i], ht[p]
        ha[p], ha[i] = ha[i], ha[p]
        i = p
    return size + 1


@njit(cache=True, nogil=True)
def heap_pop(ht, ha, size):
    """Remove the smallest (t, a); returns (t, a, new size)."""
    t, a = ht[0], ha[0]
    size -= 1
    ht[0], ha[0] = ht[size], ha[size]
    i = 0
    while True:
        left, right, m = 2 * i + 1, 2 * i + 2, i
        if left < size and (ht[left] < ht[m] or (ht[left] == ht[m] and ha[left] < ha[m])):
            m = left
        if right < size and (ht[right] < ht[m] or (ht[right] == ht[m] and ha[right] < ha[m])):
            m = right
        if m == i:
            break
        ht[m], ht[i] = ht[i], ht[m]
        ha[m], ha[i] = ha[i], ha[m]
        i = m
    return t, a, size
