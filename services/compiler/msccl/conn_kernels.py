"""The connections of an MSCCL message table as a compiled kernel (numba): the distinct (gpu, channel, peer) of
its sends or receives, sorted, and each row's index among them (services.compiler.msccl.messages.Messages.connections),
as np.unique(keys, return_inverse=True) would give them for keys gpu << 32 | channel << 16 | peer.

Rows are bucketed by gpu (a counting sort); within a gpu a (channel, peer) slot table stamped with the gpu marks
the slots seen, and only the gpu's distinct slots are sorted. Linear in the rows, where sorting the keys of a
1024-rank table (a million rows per direction) costs a sort each.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..common.arrays import unique_inverse
from .order_kernels import buckets

__all__ = ["connections"]

SLOT_TABLE_MAX = 1 << 24              # channels x peers beyond which the keys are sorted instead


def connections(gpu: np.ndarray, chan: np.ndarray, peer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys gpu << 32 | chan << 16 | peer, index of every row's key); channel and peer ids
    below 2^16, all ids non-negative."""
    if gpu.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    n_chan, n_peer = int(chan.max()) + 1, int(peer.max()) + 1
    if n_chan * n_peer > SLOT_TABLE_MAX:
        return unique_inverse(gpu.astype(np.int64) << 32 | chan.astype(np.int64) << 16 | peer.astype(np.int64))
    return _connections(gpu, chan, peer, int(gpu.max()) + 1, n_chan, n_peer)


@njit(cache=True, nogil=True)
def _connections(gpu, chan, peer, n_gpus, n_chan, n_peer):
    m = gpu.size
    start, by_gpu = buckets(gpu, n_gpus)
    stamp = np.full(n_chan * n_peer, -1, np.int64)
    local = np.empty(n_chan * n_peer, np.int64)
    seen = np.empty(n_chan * n_peer, np.int64)
    keys = np.empty(m, np.int64)
    inv = np.empty(m, np.int64)
    base = 0
    for g in range(n_gpus):
        k = 0
        for j in range(start[g], start[g + 1]):
            i = by_gpu[j]
            s = np.int64(chan[i]) * n_peer + np.int64(peer[i])
            if stamp[s] != g:
                stamp[s] = g
                seen[k] = s
                k += 1
        slots = np.sort(seen[:k])
        for q in range(k):
            s = slots[q]
            local[s] = base + q
            keys[base + q] = np.int64(g) << 32 | (s // n_peer) << 16 | (s % n_peer)
        for j in range(start[g], start[g + 1]):
            i = by_gpu[j]
            inv[i] = local[np.int64(chan[i]) * n_peer + np.int64(peer[i])]
        base += k
    return keys[:base], inv
