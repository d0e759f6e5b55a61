"""Lowering a fractional schedule to an integer chunk grid (paper App. E.2; digest 3.6).

A schedule already lives on an integer grid: chunk [lo/grid, hi/grid) of a shard. Lowering keeps it
**exactly** when P = grid * channels (the per-shard chunk count, `channels` splits every transfer over
that many MSCCL channels) fits the caller's bound `max_chunks` and the runtime's offset range
(N * P chunks per buffer). The schedule is then unchanged and the bandwidth loss is 0.

Otherwise the schedule is **approximated**: it is re-solved as the discrete chunked BFB of App. E.2
(`bfb_allgather(topology, chunks=P)`, the exact optimum of integer program (13) for P equal chunks per
shard), reduce-scatter by the reverse of the chunked BFB allgather on G^T and allreduce by both, with
the largest P within the bounds. The loss is reported as the ratio of the measured tau (T_B = tau M/B)
of the lowered schedule to that of the original (Theorem 20 bounds it by roughly d/P). The re-solved
schedule is a BFB schedule, so a schedule built by an expansion (line, degree, power) may also change
its step count; both are reported.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from services.synthesis.bfb.lp import bfb_allgather
from services.synthesis.schedule.cost import measured_tau
from services.synthesis.schedule.ir import Collective, Schedule, allreduce
from services.synthesis.topology.graph import Topology

from .errors import CompileError

DEFAULT_MAX_CHUNKS = 64


@dataclass
class Lowered:
    schedule: Schedule          # on the integer grid `chunks` (= schedule.grid)
    chunks: int                 # P: chunks per shard (channels included)
    method: str                 # "exact" or "chunked-bfb"
    tau_original: Fraction
    tau: Fraction
    steps_original: int

    @property
    def tau_ratio(self) -> float:
        return float(self.tau / self.tau_original) if self.tau_original else 1.0

    @property
    def loss(self) -> float:
        """Relative bandwidth loss: tau(lowered) / tau(original) - 1 (0.0 when exact)."""
        return self.tau_ratio - 1.0


def chunked_bfb(topology: Topology, collective: Collective, chunks: int) -> Schedule:
    """The discrete chunked BFB schedule (App. E.2) of any collective with `chunks` chunks per shard."""
    ag = bfb_allgather(topology, chunks=chunks).schedule
    if collective is Collective.ALLGATHER:
        return ag
    base = ag if topology.bidirectional else bfb_allgather(topology.transpose(), chunks=chunks).schedule
    rs = base.reverse(topology=topology.expr)
    return rs if collective is Collective.REDUCESCATTER else allreduce(rs, ag)


def lower(schedule: Schedule, topology: Topology, *, max_chunks: int = DEFAULT_MAX_CHUNKS, channels: int = 1,
          max_buffer_chunks: int = 32768, allow_resolve: bool = True) -> Lowered:
    """Integer chunk grid for `schedule` (see the module docstring)."""
    if not isinstance(channels, int) or channels < 1:
        raise CompileError(f"channels must be a positive integer, got {channels!r}", limit="channels", value=channels)
    if not isinstance(max_chunks, int) or max_chunks < channels:
        raise CompileError(f"max_chunks must be an integer >= channels ({channels}), got {max_chunks!r}",
                           limit="max_chunks", value=max_chunks)
    if schedule.nodes != topology.nodes:
        raise CompileError(f"schedule has {schedule.nodes} nodes, topology {topology.expr} has {topology.nodes}")
    n = schedule.nodes
    tau0 = measured_tau(schedule, topology.degree)
    buffer_cap = max_buffer_chunks // n                  # chunks per shard the offsets can address
    exact_p = schedule.grid * channels
    if exact_p <= max_chunks and exact_p <= buffer_cap:
        s = schedule.regrid(exact_p) if channels > 1 else schedule
        return Lowered(s, exact_p, "exact", tau0, tau0, schedule.steps)
    base = min(max_chunks, buffer_cap) // channels
    if base < 1:
        raise CompileError(f"{n} nodes x {channels} channels do not fit the runtime's {max_buffer_chunks} chunk "
                           f"offsets", limit="max_offset", value=n * channels, maximum=max_buffer_chunks)
    if not allow_resolve:
        raise CompileError(f"the schedule needs {exact_p} chunks per shard, more than the bound "
                           f"{min(max_chunks, buffer_cap)}", limit="max_chunks", value=exact_p,
                           maximum=min(max_chunks, buffer_cap))
    s = chunked_bfb(topology, schedule.collective, base)
    if channels > 1:
        s = s.regrid(s.grid * channels)
    s.topology = schedule.topology or topology.expr
    return Lowered(s, s.grid, "chunked-bfb", tau0, measured_tau(s, topology.degree), schedule.steps)
