"""Where every chunk unit lives on every gpu/rank while a lowered schedule runs (shared by the MSCCL and
oneCCL compilers). Vectorized: every method takes arrays of gpus and units.

Units. A shard is cut into P = P0 x instances chunks; unit g = v * P + j * P0 + x is piece x of instance j of
shard v (instance j carries the j-th 1/instances of every chunk of the P0-chunk schedule, so a transfer of
chunks [lo, hi) is, in instance j, the contiguous units v*P + j*P0 + [lo, hi)). The big buffer (allgather
output, reduce-scatter input, allreduce both) holds the N * P units in order.

Buffers: IBUF (input), OBUF (output), SBUF (scratch). Initially an allgather holds only its own shard
(input, or the output in place); reduce-scatter and allreduce hold every unit in the input (or, in place,
the allreduce's output). `home` is where a unit's final result belongs; `acc` where partial sums of a unit
are accumulated (the home for the gpu's own shard and for allreduce, otherwise scratch allocated per shard
on first use). `alias_key` maps a (buffer, offset) to the location it shares with in-place calls, so one
program can be checked for both modes.

All-to-all (schedule IR `ir`: [lo, hi) on the grid is a range of the source's whole buffer, block d of
grid/N chunks goes to node d). A rank's buffer is P = grid x instances units in N blocks of B = P/N; instance
j of chunk x lies in its block at d*B + j*(grid/N) + x mod (grid/N), so a block stays a block. Unit
g = v*P + position of source v's buffer. Its home is the output of its block's node d at v*B + (position
mod B); a relay keeps what it forwards in a scratch slot of B units per (source, block), allocated on first
use. Every rank relays only some units, so the location tables hold the (rank, unit) pairs the schedule
touches (`touched`) instead of all N x N*P. Out of place only.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from services.synthesis.schedule.ir import Collective

from .arrays import isin_sorted, lexorder, ranges, unique

__all__ = ["UnitLayout", "NONE", "IBUF", "OBUF", "SBUF", "alltoall_position", "alltoall_touched"]

NONE, IBUF, OBUF, SBUF = -1, 0, 1, 2


def alltoall_position(x: np.ndarray, instance: np.ndarray, nodes: int, grid: int, instances: int) -> np.ndarray:
    """Position in an all-to-all buffer of instance `instance` of chunk x (grid chunks, N blocks)."""
    b0 = grid // nodes
    return (x // b0) * (b0 * instances) + instance * b0 + x % b0


def alltoall_touched(schedule, instances: int = 1) -> np.ndarray:
    """Sorted keys rank * L + unit of every (receiver, unit) pair an all-to-all schedule's transfers deliver
    (every instance), L = N * P the units of all buffers (P = grid x instances)."""
    n, grid, k = schedule.nodes, schedule.grid, instances
    P = grid * k
    ln = (schedule.hi - schedule.lo).astype(np.int64)
    rep = np.repeat(np.arange(ln.size), ln)
    x = ranges(schedule.lo, ln)
    base = schedule.receiver[rep].astype(np.int64) * (n * P) + schedule.source[rep].astype(np.int64) * P
    del rep
    return unique(np.concatenate([base + alltoall_position(x, j, n, grid, k) for j in range(k)]))


class _PairIndex:
    """Positions of (rank, unit) pairs among a fixed sorted set of keys rank * L + unit. The tables of one
    layout share it, and it remembers its last few queries by the identity of their arrays (kept alive here,
    so an identity is never reused): the builder looks the same pairs up in several tables in a row."""

    def __init__(self, keys: np.ndarray, L: int):
        self.keys, self.L = keys, L
        self.recent: list[tuple] = []

    def __call__(self, W, G) -> np.ndarray:
        for w, g, i in self.recent:
            if w is W and g is G:
                return i
        k = np.asarray(W, np.int64) * self.L + np.asarray(G, np.int64)
        i = np.minimum(np.searchsorted(self.keys, k), max(self.keys.size - 1, 0))
        if k.size and not np.array_equal(self.keys[i], k):
            raise KeyError("a (rank, unit) pair outside the schedule's transfers")
        self.recent = [(W, G, i)] + self.recent[:3]
        return i


class _PairTable:
    """Values per (rank, unit) pair over the pairs of a _PairIndex: the dense tables' interface, t[W, G] and
    t[W, G] = values, for a collective whose ranks touch few of the N x L pairs."""

    def __init__(self, index: _PairIndex, fill, dtype):
        self.index = index
        self.values = np.full(index.keys.size, fill, dtype=dtype)

    def __getitem__(self, wg) -> np.ndarray:
        return self.values[self.index(*wg)]

    def __setitem__(self, wg, values) -> None:
        self.values[self.index(*wg)] = values


class UnitLayout:
    """Unit locations of one collective on N gpus with P units per shard.

    inplace: False (separate buffers), True (the call's buffers alias, NCCL's in-place convention).
    alloc(gpus, sizes) -> bases: scratch allocation callback (vectorized).
    """

    def __init__(self, coll: Collective, nodes: int, units_per_shard: int, inplace: bool,
                 alloc: Callable[[np.ndarray, np.ndarray], np.ndarray], touched: np.ndarray | None = None):
        self.coll, self.n, self.P, self.inplace, self.alloc = coll, nodes, units_per_shard, inplace, alloc
        n, P = nodes, units_per_shard
        L = n * P
        self.L = L
        if coll is Collective.ALLTOALL:
            self._init_alltoall(touched)
            return
        self.locbuf = np.full((n, L), NONE, dtype=np.int8)
        self.locoff = np.full((n, L), -1, dtype=np.int32)
        self.acc_base = np.full((n, n), -1, dtype=np.int32)     # scratch base of shard v's sums at gpu w
        # final values: a copy step that delivers one again is redundant (partial sums are not final)
        self.final = np.zeros((n, L), dtype=bool)
        g = np.arange(L, dtype=np.int32)
        if coll is Collective.ALLGATHER:
            for u in range(n):
                own = slice(u * P, (u + 1) * P)
                self.final[u, own] = True
                self.locbuf[u, own] = OBUF if inplace else IBUF
                self.locoff[u, own] = g[own] if inplace else np.arange(P, dtype=np.int32)
        else:
            self.locbuf[:] = OBUF if (inplace and coll is Collective.ALLREDUCE) else IBUF
            self.locoff[:] = g

    def _init_alltoall(self, touched: np.ndarray | None) -> None:
        if self.inplace:
            raise ValueError("all-to-all programs are out of place")
        n, P = self.n, self.P
        own = np.repeat(np.arange(n, dtype=np.int64), P) * (self.L + P) + np.tile(np.arange(P, dtype=np.int64), n)
        keys = unique(np.concatenate([own, np.asarray(touched if touched is not None else [], np.int64)]))
        index = _PairIndex(keys, self.L)
        self.locbuf = _PairTable(index, NONE, np.int8)
        self.locoff = _PairTable(index, -1, np.int32)
        self.final = _PairTable(index, False, bool)
        W, G = own // self.L, own % self.L
        self.locbuf[W, G] = IBUF
        self.locoff[W, G] = G % P
        self.final[W, G] = True
        self.B = P // n
        self.slot_keys = np.zeros(0, np.int64)          # (rank, source, block) relay slots, sorted
        self.slot_base = np.zeros(0, np.int64)

    # ----- buffer sizes in units ------------------------------------------------------------------
    @property
    def input_units(self) -> int:
        return self.P if self.coll in (Collective.ALLGATHER, Collective.ALLTOALL) else self.L

    @property
    def output_units(self) -> int:
        return self.P if self.coll in (Collective.REDUCESCATTER, Collective.ALLTOALL) else self.L

    @property
    def chunk_loop(self) -> int:
        """nchunksperloop: the units of the collective's large buffer (an all-to-all's one buffer)."""
        return self.P if self.coll is Collective.ALLTOALL else self.L

    def results(self) -> tuple[np.ndarray, np.ndarray]:
        """(W, G): every (gpu, unit) pair whose final value the collective leaves at gpu W."""
        n, P = self.n, self.P
        if self.coll is Collective.REDUCESCATTER:
            W = np.repeat(np.arange(n, dtype=np.int64), P)
            return W, W * P + np.tile(np.arange(P, dtype=np.int64), n)
        if self.coll is Collective.ALLTOALL:            # block w of every source v
            B = self.B
            W = np.repeat(np.arange(n, dtype=np.int64), n * B)
            v = np.tile(np.repeat(np.arange(n, dtype=np.int64), B), n)
            return W, v * P + W * B + np.tile(np.arange(B, dtype=np.int64), n * n)
        return np.repeat(np.arange(n, dtype=np.int64), self.L), np.tile(np.arange(self.L, dtype=np.int64), n)

    # ----- locations ------------------------------------------------------------------------------------
    def home(self, w: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the final result of units g must be at gpus w."""
        g = np.asarray(g, dtype=np.int64)
        w = np.broadcast_to(np.asarray(w, dtype=np.int64), g.shape)
        if self.coll is Collective.REDUCESCATTER and not self.inplace:
            return np.full(g.size, OBUF, np.int8), (g - w * self.P).astype(np.int32)
        if self.coll is Collective.REDUCESCATTER:
            return np.full(g.size, IBUF, np.int8), g.astype(np.int32)
        if self.coll is Collective.ALLTOALL:
            return self._alltoall_home(w, g)
        return np.full(g.size, OBUF, np.int8), g.astype(np.int32)

    def _alltoall_home(self, w: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Block d's node: its output at v*B + (position mod B); a relay: its (source, block) slot."""
        P, B, n = self.P, self.B, self.n
        v, pos = g // P, g % P
        d = pos // B
        buf = np.where(w == d, OBUF, SBUF).astype(np.int8)
        off = v * B + pos % B
        relay = np.flatnonzero(w != d)
        if relay.size:
            key = (w[relay] * n + v[relay]) * n + d[relay]
            new = unique(key)
            new = new[~isin_sorted(new, self.slot_keys)]
            if new.size:
                bases = self.alloc(new // (n * n), np.full(new.size, B))
                keys = np.concatenate([self.slot_keys, new])
                o = lexorder((keys,))
                self.slot_keys, self.slot_base = keys[o], np.concatenate([self.slot_base, bases])[o]
            off[relay] = self.slot_base[np.searchsorted(self.slot_keys, key)] + pos[relay] % B
        return buf, off.astype(np.int32)

    def acc(self, w: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Accumulator for the partial sums of units g at gpus w (scratch allocated on first use)."""
        g = np.asarray(g, dtype=np.int64)
        w = np.broadcast_to(np.asarray(w, dtype=np.int64), g.shape)
        if self.coll is Collective.ALLREDUCE:
            return np.full(g.size, OBUF, np.int8), g.astype(np.int32)
        P = self.P
        v = g // P
        own = v == w
        buf = np.full(g.size, SBUF, np.int8)
        off = np.empty(g.size, dtype=np.int32)
        if own.any():
            buf[own], off[own] = self.home(w[own], g[own])
        other = ~own
        if other.any():
            wv = unique(w[other] * self.n + v[other])
            ww, vv = wv // self.n, wv % self.n
            missing = self.acc_base[ww, vv] < 0
            if missing.any():
                self.acc_base[ww[missing], vv[missing]] = self.alloc(ww[missing], np.full(int(missing.sum()), P))
            off[other] = self.acc_base[w[other], v[other]] + (g[other] - v[other] * P)
        return buf, off

    def alias_key(self, w: np.ndarray, buf: np.ndarray, off: np.ndarray) -> np.ndarray:
        """Location keys under in-place aliasing: the user buffer as one index space (the big buffer's
        offsets), scratch after it. Used to order accesses so one program runs in and out of place."""
        w = np.asarray(w, dtype=np.int64)
        off = np.asarray(off, dtype=np.int64)
        key = off.copy()
        if self.coll is Collective.ALLGATHER:
            key = np.where(buf == IBUF, w * self.P + off, key)
        elif self.coll is Collective.REDUCESCATTER:
            key = np.where(buf == OBUF, w * self.P + off, key)
        return np.where(buf == SBUF, self.L + off, key)

    def plain_key(self, buf: np.ndarray, off: np.ndarray) -> np.ndarray:
        """Location keys with separate buffers: input, output and scratch in disjoint ranges."""
        off = np.asarray(off, dtype=np.int64)
        base = np.asarray(buf, dtype=np.int64) * (1 << 40)
        return base + off
