"""A training job on every Pareto-frontier topology and on today's baselines: per-topology iteration reports
and the best topology for the job (paper section 8.3, App. A.4). The CLI's `train` prints it;
a plan's select stage can serve it as is (`TrainingEvaluation.to_dict`).

Costs are measured from verified schedules, never predicted: each topology's allreduce is the schedule the
finder's construction builds for its expression (reduce-scatter = the allgather construction on the
transpose, reversed; then the allgather; `allreduce_cost`), model-checked, with (steps, tau) measured from
it; a baseline's allreduce is its own schedule (`baselines`), model-checked the same way. The all-to-all
cost is the MCF throughput of LP (3) (`alltoall.alltoall_throughput`, the paper's convention; above its exact
size the lower end of the certified bracket, at most 0.5 % below the optimum, so the time is over- rather than
under-charged, and `throughput_upper` gives the other end) or, with
`alltoall="schedule"`, a verified all-to-all schedule (`alltoall_schedule`; topologies whose schedule LP is
too large keep the MCF time and say so). Baselines: ShiftedRing and ShiftedBFBRing (d = 4) and the torus
with the traditional and the BFB schedule (even d), where they exist for (N, d); the double binary tree is
left out as in the paper's Fig. 9 (its allreduce depends on a per-size pipelining depth).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from services.synthesis.evaluate.baselines import TRAINING_BASELINES
from services.synthesis.evaluate.iteration import (
    CollectiveCost,
    IterationReport,
    TopologyCosts,
    best_bucket,
    iteration_lower_bound,
    topology_lower_bound,
)
from services.synthesis.evaluate.training_job import ModelSpec
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.graph import Topology

__all__ = ["ALLTOALL_COSTS", "AllreducePrice", "TRAIN_BASELINES", "TrainingEntry", "TrainingEvaluation",
           "allreduce_cost", "baseline_topology_costs", "evaluate_training", "topology_costs"]

TRAIN_BASELINES = TRAINING_BASELINES
ALLTOALL_COSTS = ("mcf", "schedule")


def _measured(schedule: Schedule, topology: Topology) -> CollectiveCost:
    report = verify(schedule, topology).raise_if_invalid()
    return CollectiveCost(report.steps, report.tau)


def allreduce_cost(expr: str) -> CollectiveCost:
    """(steps, tau) of the allreduce the finder's construction builds for `expr`, measured from the
    model-checked schedule (reduce-scatter and allgather each by their own construction)."""
    from services.synthesis.search.construct import construct

    built = construct(expr, Collective.ALLREDUCE)
    return _measured(built.schedule, built.topology)


def _alltoall_part(topology: Topology, alltoall: str | None) -> tuple[dict, float | None, CollectiveCost | None]:
    """(description, throughput, schedule cost) of the all-to-all on `topology`."""
    from services.synthesis.evaluate.alltoall import alltoall_throughput
    from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule

    if alltoall is None:
        return {}, None, None
    r = alltoall_throughput(topology)
    # until the bracket closes, r.throughput is its lower end (an achieved routing): the time charged is the
    # upper end of the all-to-all time bracket, never an optimistic one
    info = {"source": "mcf", "throughput": r.throughput, "exact": r.exact, "method": r.method,
            "throughput_upper": r.upper}
    f = r.throughput
    if alltoall == "schedule":
        try:
            s = alltoall_schedule(topology)
        except ValueError as exc:
            info["note"] = f"no all-to-all schedule ({exc}); the MCF time is used"
            return info, f, None
        cost = CollectiveCost(s.steps, s.tau)
        info.update(source="schedule", **cost.to_dict(), mcf_tau=s.mcf_tau, chunks_per_block=s.chunks)
        return info, f, cost
    return info, f, None


AllreducePrice = Callable[[str], CollectiveCost]
"""(steps, tau) of a topology expression's allreduce: `allreduce_cost` (measured from the model-checked
schedule) unless a caller prices it otherwise."""


def topology_costs(topology: Topology, *, alltoall: str | None = "mcf",
                   allreduce: AllreducePrice = allreduce_cost) -> tuple[TopologyCosts, dict]:
    """Costs of a topology built from an expression (`allreduce(expr)`, by default `allreduce_cost`; all-to-all
    per `alltoall`: "mcf", "schedule" or None when the job has none)."""
    info, f, sched = _alltoall_part(topology, alltoall)
    return TopologyCosts(topology.expr, topology.nodes, topology.degree, allreduce(topology.expr), f, sched), info


def baseline_topology_costs(name: str, nodes: int, degree: int, *,
                            alltoall: str | None = "mcf") -> tuple[TopologyCosts, dict, str]:
    """Costs of a baseline (`TRAIN_BASELINES`) for (N, d) and its topology expression; ValueError when it does
    not exist for (N, d)."""
    from services.synthesis.evaluate import baselines as bl

    b = bl.training_baseline(name, nodes, degree, TRAIN_BASELINES)
    info, f, sched = _alltoall_part(b.topology, alltoall)
    costs = TopologyCosts(name, nodes, degree, _measured(b.schedule(Collective.ALLREDUCE), b.topology), f, sched)
    return costs, info, b.topology.expr


@dataclass
class TrainingEntry:
    kind: str                  # "frontier", "topology" (given by the caller) or "baseline"
    name: str                  # the expression, or the baseline's name
    expr: str
    costs: TopologyCosts
    report: IterationReport
    lower_bound_s: float       # at this topology's own costs (`iteration.topology_lower_bound`)
    alltoall: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        r = self.report
        return {"kind": self.kind, "name": self.name, "expr": self.expr, "iteration_s": r.iteration_s,
                "compute_s": r.compute_s, "exposed_allreduce_s": r.exposed_allreduce_s, "alltoall_s": r.alltoall_s,
                "allreduce_busy_s": r.allreduce_s, "bucket_bytes": r.bucket_bytes, "lower_bound_s": self.lower_bound_s,
                "allreduce": self.costs.allreduce.to_dict(), "alltoall": self.alltoall}


@dataclass
class TrainingEvaluation:
    model: str
    nodes: int
    degree: int
    entries: list[TrainingEntry]
    best: TrainingEntry | None
    lower_bound_s: float

    def to_dict(self) -> dict:
        return {"model": self.model, "nodes": self.nodes, "degree": self.degree,
                "entries": [e.to_dict() for e in self.entries],
                "best": self.best.expr if self.best is not None else None,
                "best_iteration_s": self.best.report.iteration_s if self.best is not None else None,
                "lower_bound_s": self.lower_bound_s}


def evaluate_training(model: ModelSpec, nodes: int, degree: int, link: LinkModel, *,
                      topologies: list[Topology] | None = None, bidirectional: bool = False,
                      alltoall: str = "mcf", baselines=TRAIN_BASELINES, allreduce: AllreducePrice | None = None,
                      progress: Callable[[int, int, str], None] | None = None) -> TrainingEvaluation:
    """Simulate `model` on every frontier topology of (N, d) (or on `topologies`) and on the baselines that
    exist for (N, d), each with its best bucket; `best` is the non-baseline entry with the smallest iteration
    time (ties: fewer allreduce steps). `allreduce(expr)` prices the topologies' allreduces: by default the
    allreduce frontier's exact per-collective costs (search.pricing: reduce-scatter by BFB on the transpose, then
    allgather, the cost of the schedules `construct` ships), and `allreduce_cost` (built and model-checked)
    for `topologies` given here; baselines always use their own schedules. `progress(done, total, name)` is
    called before each topology and baseline is costed."""
    from services.synthesis.search.finder import frontier
    from services.synthesis.topology.catalog import build

    if alltoall not in ALLTOALL_COSTS:
        raise ValueError(f"alltoall cost must be one of {', '.join(ALLTOALL_COSTS)}, got {alltoall!r}")
    for t in topologies or ():
        if (t.nodes, t.degree) != (nodes, degree):
            raise ValueError(f"{t.expr} has {t.nodes} nodes of degree {t.degree}, not {nodes} and {degree}")
    model.expert_group(nodes)                 # ValueError when the expert-parallel groups do not tile the nodes
    moe = alltoall if any(l.is_moe for l in model.layers) else None
    kind = "topology" if topologies is not None else "frontier"
    if topologies is None:
        candidates = frontier(nodes, degree, bidirectional=bidirectional, collective=Collective.ALLREDUCE)
        topologies = [build(c.expr) for c in candidates]
        if allreduce is None:
            priced = {c.expr: CollectiveCost(*c.cost(Collective.ALLREDUCE)) for c in candidates}
            allreduce = priced.__getitem__
    allreduce = allreduce or allreduce_cost
    entries = []
    total = len(topologies) + len(baselines)
    for i, t in enumerate(topologies):
        if progress is not None:
            progress(i, total, t.expr)
        costs, info = topology_costs(t, alltoall=moe, allreduce=allreduce)
        entries.append(TrainingEntry(kind, t.expr, t.expr, costs, best_bucket(model, costs, link),
                                     topology_lower_bound(model, costs, link), info))
    for i, name in enumerate(baselines, start=len(topologies)):
        if progress is not None:
            progress(i, total, name)
        try:
            costs, info, expr = baseline_topology_costs(name, nodes, degree, alltoall=moe)
        except ValueError:
            continue                        # no such baseline for (N, d)
        entries.append(TrainingEntry("baseline", name, expr, costs, best_bucket(model, costs, link),
                                     topology_lower_bound(model, costs, link), info))
    ours = [e for e in entries if e.kind != "baseline"]
    best = min(ours, key=lambda e: (e.report.iteration_s, e.costs.allreduce.steps)) if ours else None
    return TrainingEvaluation(model.name, nodes, degree, entries, best,
                              iteration_lower_bound(model, nodes, degree, link))
