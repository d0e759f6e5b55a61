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
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from services.synthesis.schedule.ir import Collective

from .arrays import unique

__all__ = ["UnitLayout", "NONE", "IBUF", "OBUF", "SBUF"]

NONE, IBUF, OBUF, SBUF = -1, 0, 1, 2


class UnitLayout:
    """Unit locations of one collective on N gpus with P units per shard.

    inplace: False (separate buffers), True (the call's buffers alias, NCCL's in-place convention).
    alloc(gpus, sizes) -> bases: scratch allocation callback (vectorized).
    """

    def __init__(self, coll: Collective, nodes: int, units_per_shard: int, inplace: bool,
                 alloc: Callable[[np.ndarray, np.ndarray], np.ndarray]):
        self.coll, self.n, self.P, self.inplace, self.alloc = coll, nodes, units_per_shard, inplace, alloc
        n, P = nodes, units_per_shard
        L = n * P
        self.L = L
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

    # ----- buffer sizes in units ------------------------------------------------------------------
    @property
    def input_units(self) -> int:
        return self.P if self.coll is Collective.ALLGATHER else self.L

    @property
    def output_units(self) -> int:
        return self.P if self.coll is Collective.REDUCESCATTER else self.L

    def result_units(self, w: int) -> np.ndarray:
        """Units whose final value gpu w must hold."""
        if self.coll is Collective.REDUCESCATTER:
            return np.arange(w * self.P, (w + 1) * self.P)
        return np.arange(self.L)

    # ----- locations ------------------------------------------------------------------------------------
    def home(self, w: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the final result of units g must be at gpus w."""
        g = np.asarray(g, dtype=np.int64)
        w = np.broadcast_to(np.asarray(w, dtype=np.int64), g.shape)
        if self.coll is Collective.REDUCESCATTER and not self.inplace:
            return np.full(g.size, OBUF, np.int8), (g - w * self.P).astype(np.int32)
        if self.coll is Collective.REDUCESCATTER:
            return np.full(g.size, IBUF, np.int8), g.astype(np.int32)
        return np.full(g.size, OBUF, np.int8), g.astype(np.int32)

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
