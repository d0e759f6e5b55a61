"""Lowering a fractional schedule to an integer chunk grid (paper App. E.2).

A schedule already lives on an integer grid: chunk [lo/grid, hi/grid) of a shard. Lowering keeps it
**exactly** when P = grid fits the caller's bound `max_chunks` and the runtime's offset range (N * P *
instances chunks per buffer; instances cut every chunk further, services.compiler.lowering.layout). The schedule is
then unchanged and the bandwidth loss is 0.

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

from ..errors import CompileError

DEFAULT_MAX_CHUNKS = 64


def chunks_per_shard(schedule: Schedule) -> int:
    """P0: the chunks of one shard on the schedule's grid; an all-to-all's grid divides the whole buffer, so
    its chunks per block (grid / N, the unit the runtime's chunk loop counts per rank: N x P0)."""
    if schedule.collective is Collective.ALLTOALL:
        return schedule.grid // schedule.nodes
    return schedule.grid


@dataclass
class Lowered:
    schedule: Schedule          # on its integer grid
    chunks: int                 # P0: chunks per shard (all-to-all: per block), chunks_per_shard(schedule)
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


def lower(schedule: Schedule, topology: Topology, *, max_chunks: int = DEFAULT_MAX_CHUNKS, instances: int = 1,
          max_buffer_chunks: int = 32768, allow_resolve: bool = True) -> Lowered:
    """Integer chunk grid for `schedule` (see the module docstring). `instances` multiplies the units per
    shard (each chunk cut in that many parts), so the offsets must address N * P * instances units."""
    if not isinstance(instances, int) or instances < 1:
        raise CompileError(f"instances must be a positive integer, got {instances!r}", limit="instances",
                           value=instances)
    if not isinstance(max_chunks, int) or max_chunks < 1:
        raise CompileError(f"max_chunks must be a positive integer, got {max_chunks!r}", limit="max_chunks",
                           value=max_chunks)
    if schedule.nodes != topology.nodes:
        raise CompileError(f"schedule has {schedule.nodes} nodes, topology {topology.expr} has {topology.nodes}")
    n = schedule.nodes
    tau0 = measured_tau(schedule, topology.degree)
    buffer_cap = max_buffer_chunks // (n * instances)          # chunks per shard the offsets can address
    p0 = chunks_per_shard(schedule)
    if p0 <= max_chunks and p0 <= buffer_cap:
        return Lowered(schedule, p0, "exact", tau0, tau0, schedule.steps)
    base = min(max_chunks, buffer_cap)
    if base < 1:
        raise CompileError(f"{n} nodes x {instances} instances do not fit the runtime's {max_buffer_chunks} chunk "
                           f"offsets", limit="max_offset", value=n * instances, maximum=max_buffer_chunks)
    if not allow_resolve:
        raise CompileError(f"the schedule needs {p0} chunks per shard, more than the bound {base}",
                           limit="max_chunks", value=p0, maximum=base)
    if schedule.collective not in (Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE):
        raise CompileError(f"a {schedule.collective.value} schedule on {p0} chunks per "
                           f"{'block' if schedule.collective is Collective.ALLTOALL else 'shard'} exceeds the "
                           f"bound {base} and has no chunked re-solve", limit="max_chunks", value=p0, maximum=base)
    s = chunked_bfb(topology, schedule.collective, base)
    s.topology = schedule.topology or topology.expr
    return Lowered(s, s.grid, "chunked-bfb", tau0, measured_tau(s, topology.degree), schedule.steps)
