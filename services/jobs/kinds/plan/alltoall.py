"""A plan's all-to-all schedule (DESIGN 4.2 schedules): when the workload has an all-to-all
(the sizes form's `alltoall_bytes`, or a training job's MoE layers), the worker builds the chosen topology's
all-to-all schedule from the time-stepped LP (services.synthesis.evaluate.alltoall_schedule), model-checks it
again (every node ends with its block of every other node's buffer; services.jobs.stages.alltoall_build, which a
failure revision uses too), stores it as the artifact
`schedule:alltoall` with its per-step link loads, and reports its measured time T = steps * alpha + tau * D/B
against the MCF bound (D/N) / (f B/d) for each of the workload's all-to-all sizes D. A training plan also
gets the chosen topology's iteration re-simulated with the schedule's cost.

A topology whose LP is beyond the library's limits (nodes, LP variables, transfers), or whose schedule takes
longer than the task's time limit or more than its memory limit, gets a recorded refusal (`status: refused`
with the reason) and the plan goes on with its other schedules (the all-to-all schedule of a 1024-node
topology can take minutes: ten of CPU for line(circulant(16, 1, 4), 3)).
"""
from __future__ import annotations

from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule
from services.synthesis.evaluate.iteration import CollectiveCost
from services.synthesis.topology.catalog import build

from services.config import get_settings
from services.store import repo
from services.store.db import session_scope
from services.jobs.requests import workloads
from services.jobs.stages.alltoall_build import REPORTED, AllToAllRefused, build_checked, built_result
from services.jobs.stages.artifacts import link_loads_blob
from services.jobs.stages.attempts import advance, claim, plan_spec
from services.jobs.stages.training_iteration import iteration_with_alltoall

__all__ = ["REPORTED", "stage_alltoall"]

def stage_alltoall(state: dict, plan_id: str) -> dict:
    """Build, check and store the chosen topology's all-to-all schedule when the workload has an all-to-all
    (services.jobs.stages.alltoall_build)."""
    if state.get("stop"):
        return state
    spec = plan_spec(plan_id)
    sizes = workloads.alltoall_sizes(spec)
    if not sizes:
        return state
    expr = state["selected"]["expr"]
    advance(plan_id, "alltoall", 0.95, f"all-to-all schedule of {expr} (time-stepped LP)")
    topo = build(expr)
    try:
        built, report = build_checked(topo, alltoall_schedule)
    except AllToAllRefused as exc:
        return _refused(state, expr, exc.reason)
    loads = link_loads_blob(built.schedule, topo, report.tau)
    result, summary = built_result(built, report, spec.link, sizes)
    training = state.get("training")
    if training is not None:
        training = {**training, "chosen_with_alltoall_schedule": iteration_with_alltoall(
            spec, training, CollectiveCost(report.steps, report.tau))}
    advance(plan_id, "alltoall", 0.955, f"storing the all-to-all schedule ({report.transfers} transfers)")
    with session_scope(get_settings().sqlalchemy_url) as s:
        claim(s, plan_id)
        digest = repo.put_blob(s, built.schedule.to_bytes(), "schedule", "application/x-npz", compress=False)
        repo.attach(s, plan_id, "schedule:alltoall", digest, summary)
        repo.attach(s, plan_id, "loads:alltoall",
                    repo.put_blob(s, loads, "link-loads", "application/x-npz", compress=False))
    out = {**state, "schedules": {**state["schedules"], "alltoall": {**summary, "digest": digest}},
           "alltoall": result}
    if training is not None:
        out["training"] = training
    return out

def _refused(state: dict, expr: str, reason: str) -> dict:
    return {**state, "alltoall": {"status": "refused", "reason": reason, "expr": expr}}
