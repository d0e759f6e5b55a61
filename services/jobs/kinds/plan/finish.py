"""The plan's finish stage (DESIGN 4.2): predicted times per collective and message size from the verified
schedules' costs (`predicted_time_us`: the dependency-driven time the runtimes realise, DESIGN section 2;
`barrier_time_us`: the step-synchronous price beside it), the workload on today's topologies (baselines), and
the plan done with its result (atomically: a finished plan is never written again).
"""
from __future__ import annotations

from fractions import Fraction

from services.synthesis.evaluate.workload_baselines import baseline_times
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective
from services.synthesis.search.finder import candidate_from_entry, frontier_entry

from services.config import get_settings
from services.store import repo
from services.store.db import session_scope
from services.jobs.stages.attempts import Superseded, current_attempt, plan_spec
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.stages.size_sets import set_barrier_time_us, set_time_us
from services.jobs.requests.workloads import message_sizes, workload_items
from services.jobs.kinds.plan.hybrid import hybrid_baselines_time_us
from services.jobs.kinds.plan.training import baselines_time_us

__all__ = ["stage_finish"]


def stage_finish(state: dict, plan_id: str) -> dict:
    if state.get("stop"):
        return state
    spec = plan_spec(plan_id)
    link = spec.link
    sel = state["selected"]
    predicted, barrier = {}, {}
    for size in message_sizes(spec):
        for c in ALLGATHER_FAMILY:
            sch = state["schedules"][c.value]
            step_sync = (set_barrier_time_us(link, sch["by_size"], size) if sch.get("by_size")
                         else link.time(sch["steps"], Fraction(sch["tau_exact"]), size) * 1e6)
            barrier.setdefault(c.value, {})[str(size)] = step_sync
            predicted.setdefault(c.value, {})[str(size)] = (
                set_time_us(link, sch["by_size"], size) if sch.get("by_size") else step_sync)
    ag = {**sel, **frontier_entry(candidate_from_entry(sel), Collective.ALLGATHER)}   # the allgather's T_L, T_B
    result = {
        "topology": {**ag, **state["topology_facts"],
                     "t_l_us": ag["steps"] * spec.alpha_us,
                     "t_b_us_per_mib": float(Fraction(ag["tau_exact"])) * (1 << 20) / link.node_bandwidth_Bps * 1e6},
        "frontier": state["frontier"],
        "schedules": state["schedules"],
        "predicted_time_us": predicted,
        "barrier_time_us": barrier,
        "workload_time_us": sel.get("workload_time_us"),
        "fabric": state.get("fabric"),
        "compiled": state.get("compiled"),
        "baselines_time_us": _baselines_time_us(state, spec),
        "training": state.get("training"),
        "training_hybrid": state.get("training_hybrid"),
        "alltoall": state.get("alltoall"),
        "topology_strategy": state.get("topology_strategy"),
    }
    with session_scope(get_settings().sqlalchemy_url) as s:
        if not repo.finish(s, plan_id, result, attempt=current_attempt()):
            raise Superseded(f"plan {plan_id} is finished or another delivery runs it")
    return {"done": True}


def _baselines_time_us(state: dict, spec: PlanSpec) -> dict[str, float]:
    """The workload on today's topologies: a training job's iteration times (simulated at select), or the
    sizes form's workload time."""
    if state.get("training"):
        return baselines_time_us(state["training"])
    if state.get("training_hybrid"):
        return hybrid_baselines_time_us(state["training_hybrid"])
    w = spec.workload
    return {k: v * 1e6 for k, v in baseline_times(spec.nodes, spec.degree, spec.link, workload_items(spec),
                                                  w.alltoall_bytes or 0.0, w.alltoall_weight).items()}
