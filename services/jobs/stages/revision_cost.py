"""What a link failure costs a plan (DESIGN 4.9): predicted times per collective and size from a revision's
schedules, the workload's time at them, the naive fallback (a ring over the surviving links), and the
all-to-all's time per size when the plan has one (services.jobs.stages.alltoall_build: the verified schedule's, or
without one the MCF time charged at the throughput bracket's lower end), compared before and after, and for a
training plan the iteration on the degraded topology (`training_cost`). Used by
a failure revision's finish stage (services.jobs.kinds.revision) and by the restored revision a completed repair
records (services.jobs.requests.failure_reports).
"""
from __future__ import annotations

from fractions import Fraction

from services.synthesis.evaluate.iteration import CollectiveCost
from services.synthesis.schedule.ir import ALLGATHER_FAMILY

from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.stages.size_sets import set_barrier_time_us, set_time_us
from services.jobs.stages.training_iteration import chosen_entry, iteration_at
from services.jobs.requests.workloads import message_sizes, workload_items

__all__ = ["predicted_times", "barrier_times", "workload_us", "ring_fallback", "alltoall_us", "training_cost",
           "failure_cost"]


def predicted_times(spec: PlanSpec, schedules: dict) -> dict:
    """Per collective and workload size, the time (us) of the schedule served at that size (dependency-driven,
    DESIGN section 2): the range of the
    collective's schedule set holding it (`schedules.<c>.by_size`, services.jobs.stages.size_sets), else its one
    schedule. The all-to-all (its own sizes) is priced by `alltoall_us`."""
    link = spec.link
    return {c: {str(m): set_time_us(link, sm["by_size"], m) if sm.get("by_size")
                else link.time(sm["steps"], Fraction(sm["tau_exact"]), m) * 1e6
                for m in message_sizes(spec)} for c, sm in schedules.items() if c != "alltoall"}


def barrier_times(spec: PlanSpec, schedules: dict) -> dict:
    """`predicted_times`' step-synchronous price beside it (steps alpha + tau M/B of the same schedules)."""
    link = spec.link
    return {c: {str(m): set_barrier_time_us(link, sm["by_size"], m) if sm.get("by_size")
                else link.time(sm["steps"], Fraction(sm["tau_exact"]), m) * 1e6
                for m in message_sizes(spec)} for c, sm in schedules.items() if c != "alltoall"}


def workload_us(spec: PlanSpec, predicted: dict) -> float:
    """The workload's collectives at the predicted times (weights as in the plan's selection)."""
    return sum(i.weight * predicted[i.collective.value][str(int(i.size_bytes))] for i in workload_items(spec))


def ring_fallback(spec: PlanSpec) -> dict:
    """The naive fallback after a failure: a ring over surviving links, one link (B/d) per hop:
    N - 1 steps and tau = d (N-1)/N per allgather or reduce-scatter, twice that for allreduce (optimistic for
    the ring: it assumes the degraded topology still has a Hamiltonian cycle)."""
    n, d, link = spec.nodes, spec.degree, spec.link
    return {c.value: {str(m): link.collective_time(c, n - 1, Fraction(d * (n - 1), n), m) * 1e6
                      for m in message_sizes(spec)}
            for c in ALLGATHER_FAMILY}


def alltoall_us(alltoall: dict | None) -> dict[str, float]:
    """Per all-to-all size (bytes per node), the time charged for a plan's or revision's `alltoall` result:
    its verified schedule's (`schedule_us`), else the MCF time at the bracket's lower end (`mcf_bound_us` of
    an approximate result); empty when it has neither (no all-to-all, or refused)."""
    times = (alltoall or {}).get("times_us") or {}
    return {d: t["schedule_us"] if t.get("schedule_us") is not None else t["mcf_bound_us"] for d, t in times.items()}


def training_cost(spec: PlanSpec, training: dict | None, expr: str, schedules: dict, alltoall: dict | None) -> dict | None:
    """A training plan's iteration on a revision's topology `expr` (None for a sizes workload or a hybrid one,
    whose plan has no `training` block): the plan's model, link model and best bucket
    (services.jobs.stages.training_iteration) with the revision's served allreduce (`schedules.allreduce`: steps, tau)
    and, for a job with MoE layers, the revision's all-to-all: its verified schedule's cost, or without one its
    LP (3) throughput bracket's lower end (the time plan selection charges, `alltoall_us`). Compared with the
    plan's chosen iteration: `chosen_with_alltoall_schedule` when the plan has it (priced like the revision's,
    by a verified schedule), else the chosen entry's. Field names as in the plan's entries."""
    if not training or not training.get("entries") or not training.get("best"):
        return None
    chosen = chosen_entry(training)
    again = training.get("chosen_with_alltoall_schedule")
    before = again or chosen
    out = {"expr": expr, "iteration_s_before": before["iteration_s"], "bucket_bytes_before": before["bucket_bytes"],
           "before": "chosen_with_alltoall_schedule" if again else "chosen entry"}
    schedule = throughput = None
    info: dict = {}
    if training.get("moe_layers"):
        a2a = alltoall or {}
        if a2a.get("status") == "built":
            schedule = CollectiveCost(a2a["steps"], Fraction(a2a["tau_exact"]))
            info = {"source": "schedule", **schedule.to_dict(), "mcf_tau": a2a.get("mcf_tau")}
        elif a2a.get("status") == "approximate":
            throughput = a2a["mcf_lower"]
            info = {"source": "mcf", "throughput": throughput, "throughput_upper": a2a["mcf_upper"],
                    "exact": a2a.get("mcf_exact"), "method": a2a.get("mcf_method")}
        else:
            return {**out, "iteration_s": None, "slowdown": None,
                    "reason": "the degraded topology's all-to-all has no cost: " + str(a2a.get("reason"))}
    ar = CollectiveCost(schedules["allreduce"]["steps"], Fraction(schedules["allreduce"]["tau_exact"]))
    r = iteration_at(spec, expr, ar, schedule, throughput)
    return {**out, "iteration_s": r.iteration_s, "compute_s": r.compute_s,
            "exposed_allreduce_s": r.exposed_allreduce_s, "alltoall_s": r.alltoall_s,
            "allreduce_busy_s": r.allreduce_s, "bucket_bytes": r.bucket_bytes, "allreduce": ar.to_dict(),
            "alltoall": info, "slowdown": r.iteration_s / before["iteration_s"] if before["iteration_s"] else None}


def failure_cost(spec: PlanSpec, before: dict, after: dict, before_number: int,
                 alltoall_before: dict | None = None, alltoall_after: dict | None = None,
                 training: dict | None = None) -> dict:
    """Before/after per collective and size, the workload's, the ring fallback's, and the all-to-all's per size
    (`alltoall`, from the two `alltoall` results; only sizes both price); `training` (from `training_cost`)
    added when given."""
    ring = ring_fallback(spec)
    wb, wa, wr = workload_us(spec, before), workload_us(spec, after), workload_us(spec, ring)
    a2a_b, a2a_a = alltoall_us(alltoall_before), alltoall_us(alltoall_after)
    return {"compared_with_revision": before_number,
            "workload_us": {"before": wb, "after": wa, "slowdown": wa / wb if wb else None,
                            "ring_fallback": wr},
            "collectives": {c: {m: {"before_us": before[c][m], "after_us": after[c][m],
                                    "slowdown": after[c][m] / before[c][m] if before[c][m] else None,
                                    "ring_fallback_us": ring[c][m]}
                                for m in after[c]} for c in after},
            "alltoall": {d: {"before_us": a2a_b[d], "after_us": a2a_a[d],
                             "slowdown": a2a_a[d] / a2a_b[d] if a2a_b[d] else None}
                         for d in a2a_a if d in a2a_b},
            "note": "workload_us counts the workload's allgather, reduce-scatter and allreduce; the all-to-all is "
                    "re-planned on the degraded topology and compared per size under `alltoall`; the ring "
                    "fallback is one ring over surviving links, one link per hop",
            **({"training": training} if training is not None else {})}
