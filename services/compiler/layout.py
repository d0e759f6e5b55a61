"""Where every chunk unit lives on every gpu/rank while a lowered schedule runs (shared by the MSCCL and
oneCCL compilers). Unit g = v * P + c is chunk c of shard v on the integer grid of P chunks per shard.

Buffers: IBUF (input), OBUF (output), SBUF (scratch). Initially an allgather holds only its own shard
(input, or the output in place); reduce-scatter and allreduce hold every unit in the input (or, in place,
the allreduce's output). `home` is where a unit's final result belongs; `acc` where partial sums of a
unit are accumulated (the home for the gpu's own shard and for allreduce, otherwise scratch allocated
per shard on first use through the `alloc(gpu, size)` callback).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from services.synthesis.schedule.ir import Collective

NONE, IBUF, OBUF, SBUF = -1, 0, 1, 2


class UnitLayout:
    def __init__(self, coll: Collective, nodes: int, grid: int, inplace: bool, alloc: Callable[[int, int], int]):
        self.coll, self.n, self.P, self.inplace, self.alloc = coll, nodes, grid, inplace, alloc
        L = nodes * grid
        self.locbuf = np.full((nodes, L), NONE, dtype=np.int8)
        self.locoff = np.full((nodes, L), -1, dtype=np.int64)
        self.acc_base: list[dict[int, int]] = [dict() for _ in range(nodes)]
        g = np.arange(L)
        for u in range(nodes):
            if coll is Collective.ALLGATHER:
                own = slice(u * grid, (u + 1) * grid)
                self.locbuf[u, own] = OBUF if inplace else IBUF
                self.locoff[u, own] = g[own] if inplace else np.arange(grid)
            else:
                self.locbuf[u, :] = OBUF if (inplace and coll is Collective.ALLREDUCE) else IBUF
                self.locoff[u, :] = g

    def home(self, w: int, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the final result of units g must be at gpu w."""
        g = np.asarray(g, dtype=np.int64)
        if self.coll is Collective.REDUCESCATTER and not self.inplace:
            return np.full(g.size, OBUF, np.int8), g - w * self.P
        if self.coll is Collective.REDUCESCATTER:
            return np.full(g.size, IBUF, np.int8), g.copy()
        return np.full(g.size, OBUF, np.int8), g.copy()

    def acc(self, w: int, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Accumulator for the partial sums of units g at gpu w."""
        P = self.P
        if self.coll is Collective.ALLREDUCE:
            return np.full(g.size, OBUF, np.int8), g.copy()
        v = g // P
        buf = np.full(g.size, SBUF, np.int8)
        off = np.empty(g.size, dtype=np.int64)
        own = v == w
        if own.any():
            buf[own], off[own] = self.home(w, g[own])
        for vv in np.unique(v[~own]).tolist():
            base = self.acc_base[w].get(vv)
            if base is None:
                base = self.acc_base[w][vv] = self.alloc(w, P)
            sel = v == vv
            off[sel] = base + g[sel] - vv * P
        return buf, off
