"""A training plan's selection (DESIGN 4.10; paper section 8.3, App. A.4): the job's iteration simulated on every
frontier entry of (N, d) and on the baselines that exist for (N, d) (services.synthesis.evaluate.training,
the library `fabricplan train` uses), each with its best DDP bucket, and the frontier entry with the smallest
iteration time chosen (or, when the request asks for it, TopoOpt's co-optimised topology: plan.topoopt). It runs
in the worker's select stage, under the task's time and memory limits.

The plan's `training` block is `TrainingEvaluation.to_dict()` with the model's facts, the frontier entries
labelled `frontier` and the baselines `baseline`; the frontier entries' and baselines' `workload_time_us` are
their iteration times, so the plan reads the same for both workload forms.
"""
from __future__ import annotations

from fractions import Fraction

from services.synthesis.evaluate.iteration import CollectiveCost
from services.synthesis.evaluate.training import allreduce_cost, evaluate_training
from services.synthesis.evaluate.training_job import ModelSpec
from services.synthesis.topology.catalog import build

from services.jobs.requests import workloads
from services.jobs.requests.hybrid_workloads import is_hybrid
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.kinds.plan.hybrid import stage_select_hybrid
from services.jobs.kinds.plan.topoopt import select_topoopt

__all__ = ["allreduce_price", "baselines_time_us", "stage_select", "training_result"]


def allreduce_price(frontier: list[dict]):
    """How a training plan prices a frontier topology's allreduce: the entry's exact per-collective cost
    (`costs.allreduce`: the reduce-scatter by BFB on the transpose then the allgather, the cost of the schedules
    the plan ships, which its schedules stage model-checks against this price; not always twice the
    allgather), or, for an entry without it, `training.allreduce_cost` (built and measured)."""
    priced = {e["expr"]: CollectiveCost(c["steps"], Fraction(c["tau_exact"]))
              for e in frontier if (c := (e.get("costs") or {}).get("allreduce"))}
    return lambda expr: priced[expr] if expr in priced else allreduce_cost(expr)


def training_result(ev, model: ModelSpec, alltoall_cost: str) -> dict:
    """The plan's `training` block (schemas.TrainingOut)."""
    out = ev.to_dict()
    for e in out["entries"]:
        if e["kind"] == "topology":          # the plan hands evaluate_training its frontier's topologies
            e["kind"] = "frontier"
    return {**out, "layers": len(model.layers), "moe_layers": sum(layer.is_moe for layer in model.layers),
            "gradient_bytes": model.gradient_bytes, "buckets_bytes": list(model.buckets_bytes),
            "alltoall_cost": alltoall_cost}


def stage_select(state: dict, plan_id: str, spec: PlanSpec, advance) -> dict:
    """Simulate the training job on the frontier's topologies and the baselines; choose the frontier entry with
    the smallest iteration time (ties: fewer allreduce steps); a hybrid-parallel job (multi-GPU hosts) chooses
    topology and strategy together (`hybrid`)."""
    if is_hybrid(spec):
        return stage_select_hybrid(state, plan_id, spec, advance)
    model = workloads.training_model(spec)
    cost = spec.training.alltoall_cost

    def progress(done: int, total: int, name: str) -> None:
        advance(plan_id, "select", 0.2 + 0.1 * done / max(1, total),
                f"simulating an iteration of {model.name} on {name} ({done + 1} of at most {total})")

    ev = evaluate_training(model, spec.nodes, spec.degree, spec.link,
                           topologies=[build(e["expr"]) for e in state["frontier"]], alltoall=cost,
                           allreduce=allreduce_price(state["frontier"]), progress=progress)
    training = training_result(ev, model, cost)
    simulated = training["entries"][:len(state["frontier"])]          # the frontier's entries, in its order
    frontier = []
    for entry, sim in zip(state["frontier"], simulated):
        extra = {"workload_time_us": sim["iteration_s"] * 1e6}
        if sim["alltoall"].get("throughput") is not None:
            extra["alltoall_f"] = sim["alltoall"]["throughput"]
        frontier.append({**entry, **extra})
    selected = next(e for e, sim in zip(frontier, simulated) if sim["expr"] == training["best"])
    advance(plan_id, "select", 0.3, f"selected {selected['expr']}: iteration "
                                    f"{training['best_iteration_s'] * 1e3:.3f} ms")
    state = {**state, "frontier": frontier, "selected": selected, "training": training}
    if spec.topology_strategy == "topoopt":     # TopoOpt's co-optimised topology instead (plan.topoopt)
        return select_topoopt(state, plan_id, spec, model, training, advance)
    return state


def baselines_time_us(training: dict) -> dict[str, float]:
    """The baselines' iteration times (the plan's `baselines_time_us` for a training workload)."""
    return {e["name"]: e["iteration_s"] * 1e6 for e in training["entries"] if e["kind"] == "baseline"}

