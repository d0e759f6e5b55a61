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
touches (AlltoallPairs, one per schedule and instances) instead of all N x N*P. Out of place only.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numba import njit

from services.synthesis.schedule.ir import Collective

from ..common.arrays import ranges, unique

__all__ = ["UnitLayout", "AlltoallPairs", "NONE", "IBUF", "OBUF", "SBUF", "alltoall_position"]

NONE, IBUF, OBUF, SBUF = -1, 0, 1, 2


def alltoall_position(x: np.ndarray, instance: np.ndarray, nodes: int, grid: int, instances: int) -> np.ndarray:
    """Position in an all-to-all buffer of instance `instance` of chunk x (grid chunks, N blocks)."""
    b0 = grid // nodes
    return (x // b0) * (b0 * instances) + instance * b0 + x % b0


@njit(cache=True, nogil=True, inline="always")
def _triple(pair_start, tri_d, pair, d):
    """Index of triple (pair, block d) among a layout's triples; -1: absent (a pair holds a few blocks)."""
    for i in range(pair_start[pair], pair_start[pair + 1]):
        if tri_d[i] == d:
            return i
    return -1


@njit(cache=True, nogil=True)
def _mark_transfers(valid_bits, pair_start, tri_d, w, v, lo, hi, n, b0, k):
    """Set the bits of the slots of every (receiver, unit) pair the transfers deliver, every instance."""
    B = b0 * k
    for i in range(w.size):
        pair = w[i] * n + v[i]
        for x in range(lo[i], hi[i]):
            t = _triple(pair_start, tri_d, pair, x // b0)
            for j in range(k):
                slot = t * B + j * b0 + x % b0
                valid_bits[slot >> 3] |= np.uint8(1 << (slot & 7))


@njit(cache=True, nogil=True)
def _slots(pair_start, tri_d, valid_bits, W, G, n, P, B):
    """(slots, first bad position or -1) of pairs (W, G); P and B powers of two are divided by shifts."""
    out = np.empty(W.size, np.int64)
    shift = (P & (P - 1)) == 0 and (B & (B - 1)) == 0
    sP, sB = 0, 0
    while (1 << sP) < P:
        sP += 1
    while (1 << sB) < B:
        sB += 1
    last_pair, last_d, t = -1, -1, -1
    for i in range(W.size):
        g = G[i]
        if shift:
            v, pos = g >> sP, g & (P - 1)
            d, x = pos >> sB, pos & (B - 1)
        else:
            v, pos = g // P, g % P
            d, x = pos // B, pos % B
        pair = W[i] * n + v
        if pair != last_pair or d != last_d:        # queries sorted by (rank, unit) stay in a triple for a while
            last_pair, last_d, t = pair, d, _triple(pair_start, tri_d, pair, d)
        if t < 0:
            return out, i
        slot = t * B + x
        if not (valid_bits[slot >> 3] >> (slot & 7)) & 1:
            return out, i
        out[i] = slot
    return out, -1


@njit(cache=True, nogil=True)
def _relay_triples(pair_start, tri_d, w, g, n, P, B):
    """(per pair (w, g): the triple of a relay's unit, -1 at its block's node; which triples occur; the first
    relay pair whose triple is absent or -1)."""
    out = np.empty(w.size, np.int64)
    used = np.zeros(tri_d.size, np.bool_)
    last_pair, last_d, t = -1, -1, -1
    for i in range(w.size):
        v, pos = g[i] // P, g[i] % P
        d = pos // B
        if w[i] == d:
            out[i] = -1
            continue
        pair = w[i] * n + v
        if pair != last_pair or d != last_d:
            last_pair, last_d, t = pair, d, _triple(pair_start, tri_d, pair, d)
        if t < 0:
            return out, used, i
        out[i] = t
        used[t] = True
    return out, used, -1


@njit(cache=True, nogil=True)
def _home_places(tri, slot_base, g, P, B):
    """(buffer, offset) of each unit's home: the output at v*B + (position mod B), or (tri >= 0) its relay
    slot."""
    buf = np.empty(g.size, np.int8)
    off = np.empty(g.size, np.int32)
    for i in range(g.size):
        v, pos = g[i] // P, g[i] % P
        if tri[i] < 0:
            buf[i], off[i] = OBUF, v * B + pos % B
        else:
            buf[i], off[i] = SBUF, slot_base[tri[i]] + pos % B
    return buf, off


class AlltoallPairs:
    """The (rank, unit) pairs an all-to-all's ranks ever hold: every unit at its source, and every (receiver,
    unit) pair the schedule's transfers deliver (every instance). It depends only on the schedule and the
    instances, so the fit search builds it once and the candidates' layouts share it (services.compiler.fit.search).

    A pair (w, v * P + pos) lies in triple (w, v, d), block d = pos // B of source v held at rank w. The
    triples present are numbered in sorted order (`tri_d`, the blocks of pair w * N + v from `pair_start`), and
    triple t's pairs occupy slots t * B + pos mod B; `valid_bits` marks the slots of pairs present (a bit per
    slot, little-endian in bytes). A lookup is a short scan of a pair's few blocks (compiled kernels), not a
    search of all pairs."""

    def __init__(self, schedule, instances: int = 1):
        n, grid, k = schedule.nodes, schedule.grid, instances
        self.n, self.P, self.B, self.b0 = n, grid * k, grid * k // n, grid // n
        if grid % n:
            raise ValueError(f"an all-to-all grid of {grid} chunks is not {n} blocks")
        ln = (schedule.hi - schedule.lo).astype(np.int64)
        has = np.flatnonzero(ln > 0)
        w, v = schedule.receiver[has].astype(np.int64), schedule.source[has].astype(np.int64)
        lo, hi = schedule.lo[has].astype(np.int64), schedule.hi[has].astype(np.int64)
        d0 = lo // self.b0
        cnt = (hi - 1) // self.b0 - d0 + 1
        rep = np.repeat(np.arange(has.size), cnt)
        at = np.arange(n, dtype=np.int64)
        own = ((at * (n + 1))[:, None] * n + at).ravel()                  # (w, w, d): a rank's own blocks
        tri = unique(np.concatenate([own, (w[rep] * n + v[rep]) * n + ranges(d0, cnt)]))
        self.tri_d = (tri % n).astype(np.int32)
        self.pair_start = np.searchsorted(tri // n, np.arange(n * n + 1, dtype=np.int64)).astype(np.int32)
        self.size = tri.size * self.B                                   # slots: the length of a table
        valid = np.zeros(self.size, bool)
        mine = np.searchsorted(tri, own)
        valid[(mine[:, None] * self.B + np.arange(self.B)).ravel()] = True
        self.valid_bits = np.packbits(valid, bitorder="little")
        del valid
        _mark_transfers(self.valid_bits, self.pair_start, self.tri_d, w, v, lo, hi, n, self.b0, k)

    def slots(self, W, G) -> np.ndarray:
        W = np.ascontiguousarray(np.broadcast_to(np.asarray(W, np.int64), np.shape(G)))
        out, bad = _slots(self.pair_start, self.tri_d, self.valid_bits, W, np.ascontiguousarray(G, dtype=np.int64),
                          self.n, self.P, self.B)
        if bad >= 0:
            raise KeyError("a (rank, unit) pair outside the schedule's transfers")
        return out

    def relays(self, w, g) -> tuple[np.ndarray, np.ndarray]:
        """(per pair (w, g): its triple where w relays the unit, -1 where w is its block's node; which triples
        occur)."""
        w = np.ascontiguousarray(np.broadcast_to(np.asarray(w, np.int64), np.shape(g)))
        tri, used, bad = _relay_triples(self.pair_start, self.tri_d, w, np.ascontiguousarray(g, dtype=np.int64),
                                        self.n, self.P, self.B)
        if bad >= 0:
            raise KeyError("a (rank, unit) pair outside the schedule's transfers")
        return tri, used


class _PairIndex:
    """Slots of (rank, unit) pairs (AlltoallPairs) for the tables of one layout. It remembers its last few
    queries by the identity of their arrays (kept alive here, so an identity is never reused): the builder
    looks the same pairs up in several tables in a row."""

    def __init__(self, pairs: AlltoallPairs):
        self.pairs = pairs
        self.recent: list[tuple] = []

    def __call__(self, W, G) -> np.ndarray:
        for w, g, i in self.recent:
            if w is W and g is G:
                return i
        i = self.pairs.slots(W, G)
        self.recent = [(W, G, i)] + self.recent[:3]
        return i


class _PairTable:
    """Values per (rank, unit) pair over the pairs of a _PairIndex: the dense tables' interface, t[W, G] and
    t[W, G] = values, for a collective whose ranks touch few of the N x L pairs."""

    def __init__(self, index: _PairIndex, fill, dtype):
        self.index = index
        self.values = np.full(index.pairs.size, fill, dtype=dtype)

    def __getitem__(self, wg) -> np.ndarray:
        return self.values[self.index(*wg)]

    def __setitem__(self, wg, values) -> None:
        self.values[self.index(*wg)] = values


class UnitLayout:
    """Unit locations of one collective on N gpus with P units per shard.

    inplace: False (separate buffers), True (the call's buffers alias, NCCL's in-place convention).
    alloc(gpus, sizes) -> bases: scratch allocation callback (vectorized).
    pairs: an all-to-all's AlltoallPairs (required for one).
    """

    def __init__(self, coll: Collective, nodes: int, units_per_shard: int, inplace: bool,
                 alloc: Callable[[np.ndarray, np.ndarray], np.ndarray], pairs: AlltoallPairs | None = None):
        self.coll, self.n, self.P, self.inplace, self.alloc = coll, nodes, units_per_shard, inplace, alloc
        n, P = nodes, units_per_shard
        L = n * P
        self.L = L
        if coll is Collective.ALLTOALL:
            self._init_alltoall(pairs)
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

    def _init_alltoall(self, pairs: AlltoallPairs) -> None:
        if self.inplace:
            raise ValueError("all-to-all programs are out of place")
        n, P = self.n, self.P
        if pairs is None or (pairs.n, pairs.P) != (n, P):
            raise ValueError("an all-to-all layout needs the AlltoallPairs of its schedule and instances")
        own = np.repeat(np.arange(n, dtype=np.int64), P) * (self.L + P) + np.tile(np.arange(P, dtype=np.int64), n)
        index = _PairIndex(pairs)
        self.pairs = pairs
        self.locbuf = _PairTable(index, NONE, np.int8)
        self.locoff = _PairTable(index, -1, np.int32)
        self.final = _PairTable(index, False, bool)
        W, G = own // self.L, own % self.L
        self.locbuf[W, G] = IBUF
        self.locoff[W, G] = G % P
        self.final[W, G] = True
        self.B = P // n
        self.slot_base = np.full(pairs.tri_d.size, -1, np.int64)    # per triple: its relay slot (scratch)

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
        """Block d's node: its output at v*B + (position mod B); a relay: its (source, block) slot, allocated
        in the order of the triples (rank, source, block) when first used."""
        tri, used = self.pairs.relays(w, g)
        new = np.flatnonzero(used & (self.slot_base < 0))
        if new.size:
            rank = (np.searchsorted(self.pairs.pair_start, new, side="right") - 1) // self.n
            self.slot_base[new] = self.alloc(rank, np.full(new.size, self.B))
        return _home_places(tri, self.slot_base, np.ascontiguousarray(g, dtype=np.int64), self.P, self.B)

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
