"""A training job's iteration at given collective costs (DESIGN 4.10; paper section 8.3): the plan's model
(`workloads.training_model(spec)`), its link model (`PlanSpec.link`) and its best DDP bucket
(services.synthesis.evaluate.iteration.best_bucket). Shared by the plan's all-to-all stage (the chosen entry
re-simulated with its verified all-to-all schedule, services.jobs.kinds.plan.alltoall) and a failure revision's cost
(the iteration on the degraded topology, services.jobs.stages.revision_cost), so no job kind imports another.
"""
from __future__ import annotations

from fractions import Fraction

from services.synthesis.evaluate.iteration import CollectiveCost, IterationReport, TopologyCosts, best_bucket

from services.jobs.requests import workloads
from services.jobs.requests.plan_spec import PlanSpec

__all__ = ["chosen_entry", "iteration_at", "iteration_with_alltoall"]


def chosen_entry(training: dict) -> dict:
    """The plan's chosen entry in its `training` block: a frontier entry, or TopoOpt's topology (kind
    `topoopt`, when the request's topology strategy asked for it)."""
    return next(e for e in training["entries"] if e["kind"] in ("frontier", "topoopt") and e["expr"] == training["best"])


def iteration_at(spec: PlanSpec, name: str, allreduce: CollectiveCost, alltoall_schedule: CollectiveCost | None = None,
                 alltoall_throughput: float | None = None) -> IterationReport:
    """The job's iteration with its best bucket on a topology whose allreduce costs `allreduce` and whose
    all-to-all costs `alltoall_schedule` (a verified schedule) or, without one, the MCF time at
    `alltoall_throughput` (TopologyCosts)."""
    costs = TopologyCosts(name, spec.nodes, spec.degree, allreduce, alltoall_throughput, alltoall_schedule)
    return best_bucket(workloads.training_model(spec), costs, spec.link)


def iteration_with_alltoall(spec: PlanSpec, training: dict, alltoall: CollectiveCost) -> dict:
    """The chosen entry's iteration with every all-to-all priced by `alltoall` (the plan's verified all-to-all
    schedule) instead of the cost it was selected with; its best bucket again."""
    chosen = chosen_entry(training)
    ar = CollectiveCost(chosen["allreduce"]["steps"], Fraction(chosen["allreduce"]["tau_exact"]))
    return iteration_at(spec, chosen["expr"], ar, alltoall).to_dict()
