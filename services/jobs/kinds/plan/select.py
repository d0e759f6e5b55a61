"""The plan's frontier and selection stages (DESIGN 4.2): the Pareto frontier of every collective kind in the
workload (services.jobs.stages.frontiers, cached), then the entry with the smallest workload time: the sizes form's
collectives with the all-to-all share priced by MCF throughput (services.synthesis.evaluate.workload_selection), or
a training job's iteration (training).
"""
from __future__ import annotations

from services.synthesis.evaluate.workload_selection import select_workload
from services.synthesis.search.finder import candidate_from_entry

from services.jobs.stages.attempts import advance, plan_spec
from services.jobs.stages.frontiers import frontier_entries
from services.jobs.requests.workloads import is_training, workload_items
from services.jobs.kinds.plan.training import stage_select as select_for_training

__all__ = ["stage_frontier", "stage_select"]


def stage_frontier(plan_id: str) -> dict:
    """The frontier of every collective kind in the workload (their union when there are several: each entry
    carries all three collectives' costs, so selection prices a mixed workload exactly)."""
    spec = plan_spec(plan_id)
    advance(plan_id, "frontier", 0.05, "searching the Pareto frontier")
    entries, cached, seen = [], True, set()
    for kind in dict.fromkeys(i.collective for i in workload_items(spec)):
        part, hit = frontier_entries(spec.nodes, spec.degree, spec.bidirectional_only, kind)
        cached = cached and hit
        for e in part:
            if e["expr"] not in seen:
                seen.add(e["expr"])
                entries.append(e)
    advance(plan_id, "frontier", 0.2, f"{len(entries)} Pareto-efficient topologies" + (" (cached)" if cached else ""))
    return {"frontier": entries}


def stage_select(state: dict, plan_id: str) -> dict:
    if state.get("stop"):
        return state
    spec = plan_spec(plan_id)
    if is_training(spec):
        return select_for_training(state, plan_id, spec, advance)
    cands = [candidate_from_entry(e) for e in state["frontier"]]
    a2a_weight, a2a_bytes = spec.workload.alltoall_weight, spec.workload.alltoall_bytes or 0

    def measuring(count: int) -> None:
        advance(plan_id, "select", 0.25, f"all-to-all throughput of {count} frontier entries (MCF)")

    sel, f_of = select_workload(cands, spec.link, workload_items(spec), alltoall_bytes=a2a_bytes,
                                alltoall_weight=a2a_weight, on_throughputs=measuring,
                                throughputs={e["expr"]: e.get("alltoall_f") for e in state["frontier"]})
    for e in state["frontier"]:
        if e["expr"] in f_of:
            e.setdefault("alltoall_f", f_of[e["expr"]])
    times = {c.expr: t for c, t in sel.times_s}
    for e in state["frontier"]:
        e["workload_time_us"] = times[e["expr"]] * 1e6
    best = next(e for e in state["frontier"] if e["expr"] == sel.best.expr)
    advance(plan_id, "select", 0.3, f"selected {best['expr']}")
    return {**state, "selected": best}
