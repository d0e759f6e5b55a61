"""What the service materialises: a schedule of at most MAX_SCHEDULE_NODES nodes (an allgather has at least
N(N-1) transfers), and the error every builder raises beyond its limits (`ScheduleTooLarge`)."""
from __future__ import annotations

from services.synthesis.topology.graph import Topology

__all__ = ["MAX_SCHEDULE_NODES", "ScheduleTooLarge", "check_schedule_size"]

MAX_SCHEDULE_NODES = 4096      # an allgather has at least N(N-1) transfers: 16.8 M at this size


class ScheduleTooLarge(ValueError):
    """The requested schedule cannot be materialised within the service's limits."""


def check_schedule_size(topology: Topology) -> None:
    """Refuse schedules beyond MAX_SCHEDULE_NODES; `topology` may be a Topology or its Size (its tree)."""
    if topology.nodes > MAX_SCHEDULE_NODES:
        raise ScheduleTooLarge(f"{topology.expr} has {topology.nodes} nodes; a full schedule has at least "
                               f"N(N-1) = {topology.nodes * (topology.nodes - 1)} transfers, and schedules are "
                               f"built for at most {MAX_SCHEDULE_NODES} nodes")
