"""What a link failure costs a plan (DESIGN 4.9): predicted times per collective and size from a revision's
schedules, the workload's time at them, and the naive fallback (a ring over the surviving links), compared
before and after. Used by a failure revision's finish stage (services.jobs.revision) and by the restored
revision a completed repair records (services.jobs.failure_reports).
"""
from __future__ import annotations

from fractions import Fraction

from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import ALLGATHER_FAMILY

from .size_sets import set_time_us
from .workloads import message_sizes, workload_items

__all__ = ["predicted_times", "workload_us", "ring_fallback", "failure_cost"]


def predicted_times(req: dict, schedules: dict) -> dict:
    """Per collective and workload size, the time (us) of the schedule served at that size: the range of the
    collective's schedule set holding it (`schedules.<c>.by_size`, services.jobs.size_sets), else its one
    schedule."""
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    return {c: {str(m): set_time_us(link, sm["by_size"], m) if sm.get("by_size")
                else link.time(sm["steps"], Fraction(sm["tau_exact"]), m) * 1e6
                for m in message_sizes(req)} for c, sm in schedules.items()}


def workload_us(req: dict, predicted: dict) -> float:
    """The workload's collectives at the predicted times (weights as in the plan's selection)."""
    return sum(i.weight * predicted[i.collective.value][str(int(i.size_bytes))] for i in workload_items(req))


def ring_fallback(req: dict) -> dict:
    """The naive fallback after a failure: a ring over surviving links, one link (B/d) per hop:
    N - 1 steps and tau = d (N-1)/N per allgather or reduce-scatter, twice that for allreduce (optimistic for
    the ring: it assumes the degraded topology still has a Hamiltonian cycle)."""
    n, d = int(req["nodes"]), int(req["degree"])
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    return {c.value: {str(m): link.collective_time(c, n - 1, Fraction(d * (n - 1), n), m) * 1e6
                      for m in message_sizes(req)}
            for c in ALLGATHER_FAMILY}


def failure_cost(req: dict, before: dict, after: dict, before_number: int) -> dict:
    """Before/after per collective and size, the workload's, and the ring fallback's."""
    ring = ring_fallback(req)
    wb, wa, wr = workload_us(req, before), workload_us(req, after), workload_us(req, ring)
    return {"compared_with_revision": before_number,
            "workload_us": {"before": wb, "after": wa, "slowdown": wa / wb if wb else None,
                            "ring_fallback": wr},
            "collectives": {c: {m: {"before_us": before[c][m], "after_us": after[c][m],
                                    "slowdown": after[c][m] / before[c][m] if before[c][m] else None,
                                    "ring_fallback_us": ring[c][m]}
                                for m in after[c]} for c in after},
            "note": "workload_us counts the workload's collectives (an all-to-all share is not re-planned); the "
                    "ring fallback is one ring over surviving links, one link per hop"}
