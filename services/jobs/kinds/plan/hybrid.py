"""A hybrid-parallel training plan's selection (docs/training.md): `evaluate_hybrid` on every frontier
entry (priced by the frontier's exact reduce-scatter and allgather costs, the schedules the plan ships) and
baseline, each with its fastest strategy (or the request's fixed one); the frontier entry with the smallest
iteration time is chosen: topology and strategy together. The plan's `training_hybrid` block is
`HybridEvaluation.to_dict()` (frontier entries labelled `frontier`); `workload_time_us` of every frontier entry
and baseline is its iteration time.
"""
from __future__ import annotations

from fractions import Fraction

from services.synthesis.evaluate.hybrid import evaluate_hybrid, expr_fabric
from services.synthesis.evaluate.iteration import CollectiveCost
from services.synthesis.topology.catalog import build

from services.jobs.requests.hybrid_workloads import hybrid_job
from services.jobs.requests.plan_spec import PlanSpec

__all__ = ["hybrid_baselines_time_us", "stage_select_hybrid"]


def stage_select_hybrid(state: dict, plan_id: str, spec: PlanSpec, advance) -> dict:
    """Every frontier entry (priced by the frontier's exact reduce-scatter and allgather costs) and baseline with
    its fastest strategy; the frontier entry with the smallest iteration time is selected."""
    job, fixed = hybrid_job(spec)
    moe = job.model.experts is not None
    link = spec.link
    topologies = [build(e["expr"]) for e in state["frontier"]]

    def progress(done: int, total: int, name: str) -> None:
        advance(plan_id, "select", 0.2 + 0.1 * done / max(1, total),
                f"searching strategies of {job.name} on {name} ({done + 1} of at most {total})")

    prices = {}
    for e in state["frontier"]:
        c = e.get("costs") or {}
        if "reducescatter" in c and "allgather" in c:
            prices[e["expr"]] = tuple(CollectiveCost(c[k]["steps"], Fraction(c[k]["tau_exact"]))
                                      for k in ("reducescatter", "allgather"))
    ev = evaluate_hybrid(job, spec.degree, link, topologies=topologies, fixed=fixed, progress=progress,
                         fabric=lambda t: expr_fabric(t, link, moe=moe, kind="frontier", prices=prices.get(t.expr)))
    out = ev.to_dict()
    by_expr = {e["expr"]: e for e in out["entries"] if e["kind"] == "frontier"}
    frontier = [{**entry, "workload_time_us": by_expr[entry["expr"]]["iteration_s"] * 1e6}
                if by_expr.get(entry["expr"], {}).get("iteration_s") is not None else entry
                for entry in state["frontier"]]
    if ev.best is None:
        raise ValueError(out["why"])
    selected = next(e for e in frontier if e["expr"] == out["best"])
    advance(plan_id, "select", 0.3, f"selected {selected['expr']}: iteration {out['best_iteration_s']:.4g} s")
    return {**state, "frontier": frontier, "selected": selected, "training_hybrid": out}


def hybrid_baselines_time_us(training_hybrid: dict) -> dict[str, float]:
    return {e["name"]: e["iteration_s"] * 1e6 for e in training_hybrid["entries"]
            if e["kind"] == "baseline" and e.get("iteration_s") is not None}

