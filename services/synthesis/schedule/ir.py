"""Schedule IR (DESIGN section 2; paper section 3, App. B).

A schedule is the paper's set of tuples ((v, C), (u, w), t): chunk C of shard v is sent by u to its
neighbour w in comm step t. It is stored column-wise, sorted by step (CSR offsets `step_ptr`), so a
1024-node schedule with millions of transfers fits in a few arrays and serializes as one blob:

    source[i]            shard v (the source in an allgather, the destination in a reduce-scatter)
    sender[i], receiver[i], lane[i]   the link (lane = which of the parallel arcs sender->receiver)
    lo[i], hi[i]         chunk C = [lo/grid, hi/grid) of the shard, exact on an integer grid

Each step has an op: COPY (allgather semantics: the receiver stores the chunk) or REDUCE
(reduce-scatter semantics: the receiver adds the chunk into its own copy). An allreduce is a
reduce-scatter followed by an allgather (REDUCE steps, then COPY steps).

All-to-all (COPY steps; Basu et al.'s note 1.1: B_j[i] <- B_i[j]): `source` is the node whose input buffer
the chunk comes from, and [lo, hi) on the grid is a range of that WHOLE buffer (D bytes per node, not one
shard), split into N equal blocks: block j = [j/N, (j+1)/N) is destined to node j, so the grid is a multiple
of N. Node j ends with block j of every other node's buffer (its output buffer holds source i's block at
position i: output offset i/N + (lo - j/N)); relays keep what they forward in scratch space. With this unit
T_B = tau * D/B (`cost.measured_tau`).
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from enum import Enum, IntEnum
from fractions import Fraction
from typing import Iterator

import numpy as np


class Op(IntEnum):
    COPY = 0
    REDUCE = 1


class Collective(str, Enum):
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    ALLREDUCE = "allreduce"
    ALLTOALL = "alltoall"

    @classmethod
    def parse(cls, text: str) -> "Collective":
        key = text.lower().replace("-", "").replace("_", "")
        for c in cls:
            if c.value == key:
                return c
        raise ValueError(f"unknown collective {text!r}; known: {', '.join(c.value for c in cls)}")


ALLGATHER_FAMILY = (Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE)
"""The collectives built from allgather schedules (reduce-scatter by reversal, allreduce = RS + AG); the
all-to-all has schedules of its own (`evaluate.alltoall_schedule`)."""

_COLUMNS = ("source", "sender", "receiver", "lane", "lo", "hi")


@dataclass(eq=False)
class Schedule:
    collective: Collective
    nodes: int
    grid: int
    step_ptr: np.ndarray
    source: np.ndarray
    sender: np.ndarray
    receiver: np.ndarray
    lane: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    ops: np.ndarray
    topology: str = ""

    # ----- construction ---------------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, collective: Collective, nodes: int, grid: int, step: np.ndarray,
                    ops: list[Op] | np.ndarray, topology: str = "", **cols: np.ndarray) -> "Schedule":
        """Build from flat columns plus a 1-based `step` column (any order)."""
        step = np.asarray(step, dtype=np.int64)
        steps = len(ops)
        if step.size and (step.min() < 1 or step.max() > steps):
            raise ValueError(f"step numbers must lie in 1..{steps}")
        order = np.argsort(step, kind="stable")
        counts = np.bincount(step, minlength=steps + 1)[1:]
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        c = {k: np.asarray(cols[k])[order] for k in _COLUMNS}
        return cls(collective, int(nodes), int(grid), ptr,
                   c["source"].astype(np.int32), c["sender"].astype(np.int32),
                   c["receiver"].astype(np.int32), c["lane"].astype(np.int32),
                   c["lo"].astype(np.int64), c["hi"].astype(np.int64),
                   np.asarray(ops, dtype=np.uint8), topology)

    @classmethod
    def from_tuples(cls, collective: Collective, nodes: int, tuples, ops=None, topology: str = ""):
        """From the paper's tuples ((v, (lo, hi)), (u, w), t) with Fraction/int chunk bounds in [0, 1]
        (optionally ((v, (lo, hi)), (u, w, lane), t)). Small schedules and tests only."""
        rows = list(tuples)
        fr = [Fraction(x) for r in rows for x in r[0][1]]
        grid = math.lcm(*[f.denominator for f in fr]) if fr else 1
        steps = max((r[2] for r in rows), default=0)
        if ops is None:
            op = Op.REDUCE if collective is Collective.REDUCESCATTER else Op.COPY
            ops = [op] * steps
        link = [r[1] if len(r[1]) == 3 else (*r[1], 0) for r in rows]
        return cls.from_arrays(
            collective, nodes, grid, np.array([r[2] for r in rows], dtype=np.int64), ops, topology,
            source=np.array([r[0][0] for r in rows]), sender=np.array([l[0] for l in link]),
            receiver=np.array([l[1] for l in link]), lane=np.array([l[2] for l in link]),
            lo=np.array([int(Fraction(r[0][1][0]) * grid) for r in rows], dtype=np.int64),
            hi=np.array([int(Fraction(r[0][1][1]) * grid) for r in rows], dtype=np.int64))

    # ----- access -----------------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return int(self.ops.size)

    @property
    def transfers(self) -> int:
        return int(self.source.size)

    def step_slice(self, t: int) -> slice:
        """Transfers of 1-based step t."""
        return slice(int(self.step_ptr[t - 1]), int(self.step_ptr[t]))

    @property
    def step_of(self) -> np.ndarray:
        return np.repeat(np.arange(1, self.steps + 1), np.diff(self.step_ptr))

    def columns(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in _COLUMNS}

    def tuples(self) -> Iterator[tuple]:
        """The paper's tuples ((v, (lo, hi)), (u, w, lane), t) with Fraction chunk bounds."""
        g = self.grid
        for t in range(1, self.steps + 1):
            s = self.step_slice(t)
            for v, u, w, l, a, b in zip(*(getattr(self, k)[s].tolist() for k in _COLUMNS)):
                yield (v, (Fraction(a, g), Fraction(b, g))), (u, w, l), t

    # ----- transformations --------------------------------------------------------------------------
    def regrid(self, grid: int) -> "Schedule":
        """Same schedule on a finer grid (grid must be a multiple of the current one)."""
        if not isinstance(grid, (int, np.integer)) or grid < 1:
            raise ValueError(f"grid must be a positive integer, got {grid!r}")
        if grid % self.grid:
            raise ValueError(f"grid {grid} is not a multiple of {self.grid}")
        f = grid // self.grid
        return Schedule(self.collective, self.nodes, grid, self.step_ptr, self.source, self.sender,
                        self.receiver, self.lane, self.lo * f, self.hi * f, self.ops, self.topology)

    def reverse(self, topology: str | None = None) -> "Schedule":
        """Definition 5: ((v,C),(u,w),t) -> ((v,C),(w,u),t_max - t + 1) on the transpose graph.
        An allgather becomes a reduce-scatter and vice versa (Theorem 1)."""
        if self.collective in (Collective.ALLREDUCE, Collective.ALLTOALL):
            raise ValueError("reverse() applies to allgather and reduce-scatter schedules")
        counts = np.diff(self.step_ptr)[::-1]
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        idx = np.concatenate([np.arange(self.step_ptr[t - 1], self.step_ptr[t])
                              for t in range(self.steps, 0, -1)] or [np.zeros(0, np.int64)]).astype(np.int64)
        other = (Collective.REDUCESCATTER if self.collective is Collective.ALLGATHER
                 else Collective.ALLGATHER)
        return Schedule(other, self.nodes, self.grid, ptr, self.source[idx], self.receiver[idx],
                        self.sender[idx], self.lane[idx], self.lo[idx], self.hi[idx],
                        (1 - self.ops[::-1]).astype(np.uint8),
                        topology if topology is not None else self.topology)

    def then(self, other: "Schedule", collective: Collective) -> "Schedule":
        """Concatenate in time (`other`'s steps after this one's) on a common grid."""
        if other.nodes != self.nodes:
            raise ValueError("schedules over different node counts")
        g = math.lcm(self.grid, other.grid)
        a, b = self.regrid(g), other.regrid(g)
        ptr = np.concatenate([a.step_ptr, a.step_ptr[-1] + b.step_ptr[1:]])
        cols = {k: np.concatenate([getattr(a, k), getattr(b, k)]) for k in _COLUMNS}
        return Schedule(collective, self.nodes, g, ptr, ops=np.concatenate([a.ops, b.ops]),
                        topology=self.topology, **cols)

    # ----- serialization ----------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """One compressed blob (numpy .npz) holding every column and the metadata."""
        buf = io.BytesIO()
        meta = json.dumps({"collective": self.collective.value, "nodes": self.nodes, "grid": self.grid,
                           "topology": self.topology, "format": 1})
        np.savez_compressed(buf, meta=np.frombuffer(meta.encode(), dtype=np.uint8),
                            step_ptr=self.step_ptr, ops=self.ops, **self.columns())
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, blob: bytes) -> "Schedule":
        with np.load(io.BytesIO(blob)) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            cols = {k: z[k] for k in _COLUMNS}
            return cls(Collective(meta["collective"]), meta["nodes"], meta["grid"], z["step_ptr"],
                       ops=z["ops"], topology=meta["topology"], **cols)


def allreduce(reduce_scatter: Schedule, allgather: Schedule) -> Schedule:
    """Allreduce = reduce-scatter, then allgather (paper section 3)."""
    if reduce_scatter.collective is not Collective.REDUCESCATTER or allgather.collective is not Collective.ALLGATHER:
        raise ValueError("allreduce() takes a reduce-scatter and an allgather schedule")
    return reduce_scatter.then(allgather, Collective.ALLREDUCE)
