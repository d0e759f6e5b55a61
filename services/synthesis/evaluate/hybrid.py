"""A hybrid-parallel training job on multi-GPU hosts over every topology it could run on (docs/training.md): each
frontier topology of (hosts, d NICs), the switched baselines (fat-tree, fat-tree-2to1, fat-tree-4to1,
rail-optimised: `fabrics`) and today's direct-connect baselines (ShiftedRing, torus; where they exist for
(hosts, d)), each with its fastest strategy (`parallelism.search`, or the caller's fixed one) - strategy and
topology chosen together, exhaustively: every topology of the candidate set is tried with every strategy, so
the pair returned is the optimum of the model over both (TopoOpt's alternating search, NSDI'23 section 4,
is needed when the topology space is built per strategy; here the frontier is a small fixed set).

The direct-connect costs are measured from model-checked schedules (reduce-scatter and allgather separately):
the frontier entries' exact prices of the schedules `construct` ships, `construct` + `verify` for a given
expression, and the baselines' own schedules (`baselines`). MoE jobs also get the topology's all-to-all MCF
throughput (`alltoall.alltoall_throughput`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from services.synthesis.evaluate.fabrics import SWITCHED, DirectFabric, Fabric, switched_fabric
from services.synthesis.evaluate.baselines import TRAINING_BASELINES
from services.synthesis.evaluate.iteration import CollectiveCost
from services.synthesis.evaluate.parallelism import Infeasible, Job, StrategyResult, feasible, search
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.graph import Topology

__all__ = ["DIRECT_BASELINES", "HYBRID_BASELINES", "HybridEntry", "HybridEvaluation", "baseline_fabric",
           "expr_fabric", "evaluate_hybrid"]

DIRECT_BASELINES = TRAINING_BASELINES
HYBRID_BASELINES = tuple(SWITCHED) + DIRECT_BASELINES


def _measured(schedule, topology: Topology) -> CollectiveCost:
    r = verify(schedule, topology).raise_if_invalid()
    return CollectiveCost(r.steps, r.tau)


def _throughput(topology: Topology, moe: bool) -> float | None:
    if not moe:
        return None
    from services.synthesis.evaluate.alltoall import alltoall_throughput

    return alltoall_throughput(topology).throughput


def expr_fabric(topology: Topology, link: LinkModel, *, moe: bool, kind: str = "topology",
                prices: tuple[CollectiveCost, CollectiveCost] | None = None) -> DirectFabric:
    """A direct-connect expression's fabric: (reduce-scatter, allgather) from `prices` (the frontier's exact
    costs of the shipped schedules) or built by `construct` and model-checked."""
    if prices is None:
        from services.synthesis.search.construct import construct

        rs_b = construct(topology.expr, Collective.REDUCESCATTER)
        ag_b = construct(topology.expr, Collective.ALLGATHER)
        prices = (_measured(rs_b.schedule, rs_b.topology), _measured(ag_b.schedule, ag_b.topology))
    return DirectFabric(kind, topology.expr, topology.expr, topology.nodes, topology.degree, link,
                        reducescatter=prices[0], allgather=prices[1],
                        alltoall_throughput=_throughput(topology, moe))


def baseline_fabric(name: str, hosts: int, nics: int, link: LinkModel, *, moe: bool,
                    kind: str = "baseline") -> Fabric:
    """A baseline's fabric; ValueError when it does not exist for (hosts, nics)."""
    if name.lower().replace("_", "-").replace("optimized", "optimised") in SWITCHED:
        return replace(switched_fabric(name, hosts, nics, link), kind=kind)
    from services.synthesis.evaluate import baselines as bl

    b = bl.training_baseline(name, hosts, nics, HYBRID_BASELINES)
    rs = _measured(b.schedule(Collective.REDUCESCATTER), b.topology)
    ag = _measured(b.schedule(Collective.ALLGATHER), b.topology)
    return DirectFabric(kind, name, b.topology.expr, hosts, nics, link, reducescatter=rs, allgather=ag,
                        alltoall_throughput=_throughput(b.topology, moe))


@dataclass
class HybridEntry:
    fabric: Fabric
    result: StrategyResult | None
    refused: str | None = None

    @property
    def iteration_s(self) -> float:
        return self.result.iteration_s if self.result is not None else float("inf")

    def to_dict(self) -> dict:
        out = {**self.fabric.to_dict()}
        if self.result is None:
            return {**out, "iteration_s": None, "refused": self.refused}
        return {**out, **self.result.to_dict()}


@dataclass
class HybridEvaluation:
    job: Job
    nics: int
    link: LinkModel
    entries: list[HybridEntry]
    best: HybridEntry | None
    why: str

    def to_dict(self) -> dict:
        j = self.job
        return {"model": j.name, "hosts": j.hosts, "gpus_per_host": j.gpus_per_host, "gpus": j.gpus,
                "nics_per_host": self.nics, "device": j.device.name, "precision": j.precision,
                "global_batch": j.global_batch, "parameters": j.model.parameters,
                "model_flops_per_iteration": j.model_flops(),
                "device_efficiency": j.device.efficiency_at(j.model.hidden),
                "entries": [e.to_dict() for e in self.entries],
                "best": self.best.fabric.expr if self.best is not None else None,
                "best_iteration_s": self.best.iteration_s if self.best is not None else None,
                "why": self.why}


def _why(best: HybridEntry | None, entries: list[HybridEntry]) -> str:
    if best is None:
        return "no candidate topology runs the job: " + "; ".join(
            f"{e.fabric.name}: {e.refused}" for e in entries if e.refused)[:2000]
    s, b = best.result.strategy, best.result.breakdown
    parts = [(f"{best.fabric.expr} with tp={s.tp}{'' if s.cp == 1 else f', cp={s.cp}'}, pp={s.pp}, dp={s.dp}, "
              f"ep={s.ep}, zero={s.zero}, "
              f"micro-batch {s.micro_batch}, interleave {s.interleave}, recompute {s.recompute}"
              + (f", MoE overlap {s.moe_overlap}, dispatch {s.moe_dispatch}" if best.result.traffic.ep else "") + ": "
              f"{best.iteration_s:.4g} s per iteration, the fastest of {len(entries)} topologies each with its "
              f"fastest strategy ({best.result.searched} strategies tried per topology)")]
    exposed = {"bubble": b.bubble, "TP": b.tp, "CP": b.cp, "PP": b.pp, "DP": b.dp, "EP": b.ep}
    worst = max(exposed, key=exposed.get)
    parts.append(f"compute {b.compute / best.iteration_s:.0%} of it; the largest overhead is {worst} "
                 f"({exposed[worst] / best.iteration_s:.1%})")
    others = [e for e in entries if e is not best and e.result is not None and e.fabric.kind == "baseline"]
    if others:
        fastest = min(others, key=lambda e: e.iteration_s)
        parts.append(f"best baseline {fastest.fabric.name}: {fastest.iteration_s / best.iteration_s:.3f}x the time")
    return "; ".join(parts)


def evaluate_hybrid(job: Job, nics: int, link: LinkModel, *, topologies: list | None = None,
                    fixed: dict | None = None, baselines=HYBRID_BASELINES, bidirectional: bool = False,
                    progress: Callable[[int, int, str], None] | None = None,
                    fabric: Callable[[Topology], Fabric] | None = None) -> HybridEvaluation:
    """The job on every frontier topology of (job.hosts, nics) (or on `topologies`: Topology objects or
    switched-baseline names) and on the baselines that exist for (hosts, nics), each with its fastest strategy
    (or `fixed`); `best` the fastest non-baseline entry (ties: the earlier). `fabric(topology)` prices a given
    topology (default `expr_fabric`: built and model-checked)."""
    moe = job.model.experts is not None
    fabrics: list = []
    if topologies is None:
        from services.synthesis.search.finder import frontier
        from services.synthesis.topology.catalog import build

        for c in frontier(job.hosts, nics, bidirectional=bidirectional, collective=Collective.ALLREDUCE):
            prices = (CollectiveCost(*c.cost(Collective.REDUCESCATTER)), CollectiveCost(*c.cost(Collective.ALLGATHER)))
            fabrics.append(lambda c=c, p=prices: expr_fabric(build(c.expr), link, moe=moe, kind="frontier", prices=p))
    else:
        for t in topologies:
            if isinstance(t, str):
                fabrics.append(lambda t=t: baseline_fabric(t, job.hosts, nics, link, moe=moe, kind="topology"))
            else:
                if (t.nodes, t.degree) != (job.hosts, nics):
                    raise ValueError(f"{t.expr} has {t.nodes} nodes of degree {t.degree}, not {job.hosts} hosts "
                                     f"with {nics} NICs")
                fabrics.append(lambda t=t: fabric(t) if fabric is not None else expr_fabric(t, link, moe=moe))
    given = {t.lower() for t in topologies or () if isinstance(t, str)}
    names = [b for b in baselines if b not in given]
    candidates = feasible(job, fixed)
    entries: list[HybridEntry] = []
    total = len(fabrics) + len(names)
    for i, make in enumerate(fabrics):
        fab = make()
        if progress is not None:
            progress(i, total, fab.expr)
        entries.append(_entry(job, fab, fixed, candidates))
    for i, name in enumerate(names, start=len(fabrics)):
        if progress is not None:
            progress(i, total, name)
        try:
            fab = baseline_fabric(name, job.hosts, nics, link, moe=moe)
        except ValueError:
            continue                     # no such baseline for (hosts, nics)
        entries.append(_entry(job, fab, fixed, candidates))
    ours = [e for e in entries if e.fabric.kind != "baseline" and e.result is not None]
    best = min(ours, key=lambda e: e.iteration_s) if ours else None
    return HybridEvaluation(job, nics, link, entries, best, _why(best, entries))


def _entry(job: Job, fab: Fabric, fixed: dict | None, candidates) -> HybridEntry:
    try:
        return HybridEntry(fab, search(job, fab, fixed, candidates))
    except Infeasible as exc:
        return HybridEntry(fab, None, str(exc))
