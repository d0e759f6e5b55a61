"""Hierarchical collectives over G x N GPUs from the host schedules the finder's construction builds: the
host-level schedule of `construct` lifted to the GPU graph by services.synthesis.schedule.hierarchical (its module
docstring states the GPU graph, the lifting and the per-phase pricing)."""
from __future__ import annotations

from services.synthesis.schedule.hierarchical import gpu_topology, hierarchical_allgather
from services.synthesis.schedule.ir import Collective, Schedule, allreduce
from services.synthesis.search.construct import construct
from services.synthesis.topology.graph import Topology

__all__ = ["hierarchical"]


def hierarchical(host: Topology, gpus: int, collective: Collective, *, host_ag: Schedule | None = None,
                 host_rs: Schedule | None = None) -> tuple[Schedule, Topology]:
    """(GPU-level schedule of `collective`, GPU graph) from the host schedules the finder's construction
    builds for `host.expr` (or the ones given)."""
    topo, _, _ = gpu_topology(host, gpus)
    parts = []
    if collective in (Collective.REDUCESCATTER, Collective.ALLREDUCE):
        rs = host_rs if host_rs is not None else construct(host.expr, Collective.REDUCESCATTER).schedule
        lifted = hierarchical_allgather(rs.reverse(), host, gpus, transpose=True)
        parts.append(lifted.reverse(topology=topo.expr))
    if collective in (Collective.ALLGATHER, Collective.ALLREDUCE):
        ag = host_ag if host_ag is not None else construct(host.expr, Collective.ALLGATHER).schedule
        parts.append(hierarchical_allgather(ag, host, gpus))
    if not parts:
        raise ValueError(f"hierarchical schedules are built for allgather, reduce-scatter and allreduce, "
                         f"not {collective.value}")
    return (parts[0] if len(parts) == 1 else allreduce(parts[0], parts[1])), topo
