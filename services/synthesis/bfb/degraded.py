"""Schedules after a link failure: the degraded topology and its verified allgather, reduce-scatter and
allreduce schedules with their costs (TopoOpt section 7 and App. C.3 step 5: on a link failure,
re-plan on what is left).

The failed arcs are removed (`topology.failures.remove_arcs`: the rest must stay strongly connected), the
surviving links keep their latency and bandwidth (and the nominal degree d: each still carries B/d), and
both schedulers run on the degraded digraph: BFB (LP (1); LP (14) too when the links differ), which is
defined on any digraph, and the greedy link-chunk matcher (`greedy`). Per collective the faster schedule
that passes the model checker is served (`compare`). On a vertex-transitive topology only the receivers
whose BFB problems the failure changed are solved (`incremental`), and the greedy schedule is built only
when its lower bound does not already lose. A plan revision is this plus compilation and storage.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from services.synthesis.bfb.compare import COLLECTIVES, Comparison, schedule_collectives
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.topology.failures import Degraded, remove_arcs
from services.synthesis.topology.graph import Topology

__all__ = ["DegradedSchedules", "degraded_schedules"]


@dataclass
class DegradedSchedules:
    """The degraded topology (with the map from its arcs to the original's), the per-arc costs on it and, per
    collective, the candidates and the schedule served."""

    degraded: Degraded
    costs: LinkCosts
    comparisons: dict[Collective, Comparison]
    seconds: float

    @property
    def topology(self) -> Topology:
        return self.degraded.topology

    def as_dict(self) -> dict:
        g = self.topology
        return {"expr": g.expr, "nodes": g.nodes, "degree": g.degree, "diameter": g.diameter,
                "removed": [[int(self.degraded.original.tails[a]), int(self.degraded.original.heads[a]),
                             int(self.degraded.original.lanes[a])] for a in self.degraded.removed],
                "seconds": round(self.seconds, 6),
                "collectives": {c.value: {**cmp.as_dict(), "steps": cmp.chosen.steps, "tau": float(cmp.chosen.tau),
                                          "tau_exact": str(cmp.chosen.tau), "time_us": cmp.chosen.time_s * 1e6,
                                          "barrier_time_us": cmp.chosen.barrier_time_s * 1e6,
                                          "verified": cmp.chosen.verified}
                                for c, cmp in self.comparisons.items()}}


def degraded_schedules(topology: Topology, failed, link: LinkModel | LinkCosts, size_bytes: float, *,
                       collectives=COLLECTIVES, verify_mode: str = "chosen", **kw) -> DegradedSchedules:
    """Remove the failed arcs and build verified schedules on what is left.

    Parameters
    ----------
    topology : Topology
        The topology as planned.
    failed : iterable of (tail, head) or (tail, head, lane)
        The failed links.
    link : LinkModel or LinkCosts
        The alpha-beta model of a uniform fabric, or per-arc costs of `topology` (the survivors keep theirs).
    size_bytes : float
        M: decides which scheduler's schedule is faster.
    collectives : iterable of Collective
        Default: allgather, reduce-scatter and allreduce.
    verify_mode : "chosen" or "all"
        Model-check only the served schedule (the fastest that passes) or every candidate.
    **kw
        Passed to `compare.build_candidates` (schedulers, greedy_chunks, seed, bfb_options; by default the
        intact topology is BFB's `reference` (only receivers whose problems changed are solved when it is
        vertex-transitive), and the greedy scheduler is not built when its lower bound is already slower
        (`prune`)).

    Returns
    -------
    DegradedSchedules

    Raises
    ------
    TopologyError
        A failed arc the topology lacks, or a failure that disconnects it.

    Examples
    --------
    >>> from services.synthesis.topology.catalog import build
    >>> out = degraded_schedules(build("torus(4, 4)"), [(0, 1), (5, 6)], LinkModel.from_units(10, 100), 2**20)
    >>> out.topology.expr
    'remove(torus(4, 4), 0>1, 5>6)'
    >>> ag = out.comparisons[Collective.ALLGATHER]
    >>> ag.chosen.scheduler, ag.chosen.verified, ag.chosen.steps, ag.chosen.tau
    ('bfb', True, 4, Fraction(5, 4))
    """
    t0 = time.perf_counter()
    cut = remove_arcs(topology, failed)
    if isinstance(link, LinkCosts):
        if link.topology is not topology:
            raise ValueError(f"the link costs are for {link.topology.expr}, not {topology.expr}")
        costs = LinkCosts(cut.topology, link.alpha_s[cut.kept], link.bandwidth_Bps[cut.kept])
    else:
        costs = LinkCosts.uniform(cut.topology, link)
    if "schedulers" not in kw:
        kw["schedulers"] = ("bfb", "greedy") if costs.uniform_model is not None else ("bfb-hetero", "bfb", "greedy")
    kw.setdefault("prune", True)
    kw.setdefault("reference", topology)
    comparisons = schedule_collectives(cut.topology, costs, size_bytes, collectives=collectives,
                                       verify_mode=verify_mode, **kw)
    return DegradedSchedules(cut, costs, comparisons, time.perf_counter() - t0)
