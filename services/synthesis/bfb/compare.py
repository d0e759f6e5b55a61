"""Two schedulers, one choice: BFB and the greedy link-chunk matcher priced on the same links, model-checked,
and the faster verified schedule served (paper section 6 and App. E.3, dissertation section 5).

Candidates per collective:
- ``bfb``: LP (1), the optimal BFB schedule (D(G) steps; paper section 6), or the schedule an expression's
  own construction gives (`fabricplan schedule`, passed in as a prebuilt candidate);
- ``bfb-hetero``: LP (14) when the links differ (App. E.3);
- ``greedy``: TACOS, event-driven link-chunk matching on the links' own latencies and bandwidths (`greedy`),
  its chunk layout chosen on its simulated time at the size;
- ``trees``: spanning out-trees packed to the cut bound on the links' bandwidths (exactly up to 128 nodes,
  balanced shortest-path trees beyond), pipelined with the chunk count fastest at the size (`forest`);
- ``bfb-fast``: LP (1) on the topology without its slower links (`bfb.fast_links`), when it stays connected.

Every candidate is priced from its own schedule as the runtimes run it: the dependency-driven time (each link
sends its steps in order, a step's message waits for its link and its data; `schedule.dependency`), the time
served (`time_us`); beside it the step-synchronous price, sum over steps of the slowest used link's
alpha + bytes / bandwidth (`LinkCosts.time`; on uniform links steps * alpha + tau * M/B; `barrier_time_us`).
Candidates are ranked on the time served and verified fastest first; the first that passes the model checker is chosen (with ``verify_mode="all"`` every
candidate is checked, so both costs are shown as verified). A candidate that would exceed the size limits
is listed as skipped, with the reason.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import numpy as np

from services.synthesis.bfb.greedy import MAX_GREEDY_TRANSFERS, chunk_options, tacos_allgather
from services.synthesis.bfb.hetero import bfb_heterogeneous
from services.synthesis.bfb.incremental import bfb_allgather_near
from services.synthesis.bfb.lp import ScheduleTooLarge, bfb_allgather
from services.synthesis.bfb.fast_links import FastLinksUnavailable, bfb_fast_links
from services.synthesis.forest.packing import pack_trees
from services.synthesis.bfb.schedule_sets import fastest_tree_allreduce, fastest_trees
from services.synthesis.schedule.cost import measured_tau
from services.synthesis.schedule.dependency import dependency_time
from services.synthesis.schedule.ir import Collective, Schedule, allreduce
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.verify import ScheduleInvalid, verify, verify_allreduce_phases
from services.synthesis.topology.graph import Topology

__all__ = ["Candidate", "Comparison", "build_candidates", "choose", "priced", "schedule_collectives"]

COLLECTIVES = (Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE)
SCHEDULERS = ("bfb", "bfb-hetero", "greedy", "trees", "bfb-fast")


@dataclass
class Candidate:
    """One scheduler's schedule of one collective with its measured cost; `schedule` is None when skipped."""

    scheduler: str
    schedule: Schedule | None
    steps: int = 0
    tau: Fraction = Fraction(0)
    time_s: float = float("inf")               # dependency-driven (the time served)
    seconds: float = 0.0
    predicted_tau: Fraction | None = None       # the scheduler's own prediction (None: none exact)
    predicted_time_s: float | None = None       # LP (14)'s optimum, for bfb-hetero
    verified: bool | None = None                # None: not checked (a faster candidate passed), or skipped
    violation: dict | None = None
    skipped: str | None = None
    phases: tuple["Candidate", "Candidate"] | None = field(default=None, repr=False)   # allreduce: (RS, AG)
    report: object = field(default=None, repr=False)                                   # VerificationReport
    barrier_time_s: float = float("inf")       # step-synchronous (the paper's price)

    def as_dict(self) -> dict:
        out = {"scheduler": self.scheduler, "verified": self.verified}
        if self.skipped is not None:
            return {**out, "skipped": self.skipped}
        out.update(steps=self.steps, tau=float(self.tau), tau_exact=str(self.tau), time_us=self.time_s * 1e6,
                   barrier_time_us=self.barrier_time_s * 1e6, seconds=round(self.seconds, 6))
        if self.predicted_time_s is not None:
            out["predicted_time_us"] = self.predicted_time_s * 1e6
        if self.violation is not None:
            out["violation"] = self.violation
        return out


@dataclass
class Comparison:
    """The candidates of one collective, fastest first, and the one served."""

    topology: Topology
    collective: Collective
    size_bytes: float
    candidates: list[Candidate]
    chosen: Candidate
    seconds: float = 0.0
    reports: dict = field(default_factory=dict, repr=False)    # scheduler -> VerificationReport

    def as_dict(self) -> dict:
        return {"size_bytes": self.size_bytes, "chosen": self.chosen.scheduler,
                "candidates": [c.as_dict() for c in self.candidates]}


def priced(scheduler: str, schedule: Schedule, costs: LinkCosts, size_bytes: float, seconds: float = 0.0,
           predicted_tau: Fraction | None = None, predicted_time_s: float | None = None) -> Candidate:
    """A candidate with its costs measured from the schedule (not verified yet): `time_s`, the
    dependency-driven time (`schedule.dependency`: each link in step order, each group waiting only for its
    link and its data, as the runtimes run it), which ranks the candidates, and `barrier_time_s`, the
    step-synchronous price (on uniform links T = (non-empty steps) alpha + tau M/B, `LinkCosts.time` step by
    step). A schedule that reads data its sender never holds has no dependency time: it is priced at infinity
    and the model checker rejects it."""
    used = np.flatnonzero(np.diff(schedule.step_ptr) > 0)
    steps = int(used[-1] + 1) if used.size else 0
    tau = measured_tau(schedule, costs.topology.degree)
    model = costs.uniform_model
    barrier = model.time(used.size, tau, size_bytes) if model is not None else costs.time(schedule, size_bytes)
    try:
        served = dependency_time(schedule, costs, size_bytes)
    except ValueError:                   # a sender lacks what it sends: the model checker rejects it in `choose`
        served = float("inf")
    return Candidate(scheduler, schedule, steps, tau, served, seconds, predicted_tau, predicted_time_s,
                     barrier_time_s=barrier)


def choose(topology: Topology, collective: Collective, candidates: list[Candidate], size_bytes: float, *,
           verify_mode: str = "chosen") -> Comparison:
    """Verify candidates fastest first and serve the first that passes (`verify_mode` "all" checks all).

    Raises ScheduleInvalid when no candidate passes (a bug in a scheduler: never served), ValueError when
    every candidate was skipped."""
    if verify_mode not in ("chosen", "all"):
        raise ValueError(f"verify_mode must be 'chosen' or 'all', got {verify_mode!r}")
    t0 = time.perf_counter()
    ranked = sorted(candidates, key=lambda c: (c.skipped is not None, c.time_s))   # stable: ties keep order
    chosen, reports = None, {}
    for c in ranked:
        if c.skipped is not None or (chosen is not None and verify_mode == "chosen"):
            continue
        report = reports[c.scheduler] = _check(c, topology, collective)
        if report.ok and chosen is None:
            chosen = c
    if chosen is None:
        bad = next((c for c in ranked if c.violation is not None), None)
        if bad is None:
            raise ValueError("no schedule was built: " + "; ".join(f"{c.scheduler}: {c.skipped}" for c in ranked))
        raise ScheduleInvalid(reports[bad.scheduler].violation)
    return Comparison(topology, collective, size_bytes, ranked, chosen, time.perf_counter() - t0, reports)


def _check(c: Candidate, topology: Topology, collective: Collective):
    """Model-check a candidate once (an allreduce built from two phases: by its phases, when both pass)."""
    if c.report is None:
        if c.phases is not None:
            rs, ag = (_check(p, topology, k) for p, k in zip(c.phases, (Collective.REDUCESCATTER,
                                                                          Collective.ALLGATHER)))
            composed = verify_allreduce_phases(rs, ag, c.steps)
            c.report = composed if composed.ok else verify(c.schedule, topology, collective)
        else:
            c.report = verify(c.schedule, topology, collective)
        c.verified = c.report.ok
        c.violation = None if c.report.ok else c.report.violation.as_dict()
    return c.report


def build_candidates(topology: Topology, costs: LinkCosts, size_bytes: float, *,
                     collectives=COLLECTIVES, schedulers=("bfb", "greedy"), greedy_chunks: int = 1,
                     seed: int = 0, bfb_options: dict | None = None, reference: Topology | None = None,
                     prune: bool = False, prebuilt: dict | None = None) -> dict[Collective, list[Candidate]]:
    """Every scheduler's schedules of `collectives`, priced (not verified).

    Each scheduler builds its allgather on G and, when a reduce-scatter or allreduce is wanted and G is not
    bidirectional (or the links are not uniform), on G^T: reduce-scatter = that allgather reversed
    (Cor. 1.1, Def. 5), allreduce = reduce-scatter then allgather. `prebuilt` maps a scheduler name to
    {collective: (schedule, seconds, predicted_tau)} built elsewhere (e.g. an expression's construction).
    `schedulers` may name any of SCHEDULERS; `bfb_options` go to `bfb_allgather` (workers,
    shortcut, chunks). With a vertex-transitive `reference` that `topology` differs from in a few arcs, BFB
    solves only the receivers whose problems changed (`incremental`). With `prune`, the greedy scheduler is
    not built when its lower bound (at least max(D, (N-1)P/delta) steps, each at least the cheapest link's
    alpha + chunk time) is already slower than a candidate built before it for every collective wanted."""
    if isinstance(greedy_chunks, bool) or not isinstance(greedy_chunks, int) or greedy_chunks < 1:
        raise ValueError(f"greedy chunks must be a positive integer, got {greedy_chunks!r}")
    unknown = set(schedulers) - set(SCHEDULERS)
    if unknown:
        raise ValueError(f"unknown scheduler {sorted(unknown)[0]!r}; known: {', '.join(SCHEDULERS)}")
    out: dict[Collective, list[Candidate]] = {c: [] for c in collectives}
    for name, built in (prebuilt or {}).items():
        for c in collectives:
            schedule, seconds, pred = built[c]
            out[c].append(priced(name, schedule, costs, size_bytes, seconds, pred))
    for name in schedulers:
        if name == "greedy":
            limit = topology.nodes * (topology.nodes - 1) * greedy_chunks
            if limit > MAX_GREEDY_TRANSFERS or not chunk_options(topology.nodes, greedy_chunks):
                reason = (f"{limit} transfers with {greedy_chunks} chunk(s) per shard exceed the greedy "
                          f"scheduler's limit of {MAX_GREEDY_TRANSFERS}")
                for c in collectives:
                    out[c].append(Candidate(name, None, skipped=reason))
                continue
            bound = _greedy_bounds(topology, costs, size_bytes, greedy_chunks)
            beaten = {c: next((x for x in out[c] if x.skipped is None and x.time_s <= bound[c]), None)
                      for c in collectives}
            if prune and all(beaten.values()):
                for c in collectives:
                    out[c].append(Candidate(name, None, skipped=(
                        f"not built: at least {bound[c] * 1e6:.1f} us, slower than {beaten[c].scheduler}'s "
                        f"{beaten[c].time_s * 1e6:.1f} us")))
                continue
            build = _greedy_builder(costs, size_bytes, greedy_chunks, seed)
        elif name == "bfb":
            build = _bfb_builder(bfb_options or {}, reference)
        elif name == "trees":
            build = _trees_builder(size_bytes)
        elif name == "bfb-fast":
            build = _fast_links_builder()
        else:
            build = _hetero_builder(size_bytes)
        if name == "bfb":
            _by_orientation(out, name, topology, costs, size_bytes, build)
            continue
        try:                                  # the comparators' own limits skip them, never the command
            _by_orientation(out, name, topology, costs, size_bytes, build)
        except (ScheduleTooLarge, FastLinksUnavailable) as exc:
            for c in collectives:
                out[c] = [x for x in out[c] if x.scheduler != name] + [Candidate(name, None, skipped=str(exc))]
    return out


def schedule_collectives(topology: Topology, costs: LinkCosts, size_bytes: float, *,
                         collectives=COLLECTIVES, verify_mode: str = "chosen", **kw) -> dict[Collective, Comparison]:
    """Build, price and verify every scheduler's schedules; per collective the faster verified one.

    Parameters
    ----------
    topology : Topology
        Any strongly connected digraph.
    costs : LinkCosts
        Per-arc alpha and bandwidth (`LinkCosts.uniform` for the alpha-beta model).
    size_bytes : float
        M, the collective's size: it decides which schedule is faster.
    collectives : iterable of Collective
    verify_mode : "chosen" or "all"
    **kw
        Passed to `build_candidates` (schedulers, greedy_chunks, seed, bfb_options, prebuilt).

    Returns
    -------
    dict of Collective to Comparison

    Examples
    --------
    >>> from services.synthesis.schedule.cost import LinkModel
    >>> from services.synthesis.topology.catalog import build
    >>> g = build("remove(torus(4, 4), 0>1)")
    >>> out = schedule_collectives(g, LinkCosts.uniform(g, LinkModel.from_units(10, 100)), 2**20)
    >>> ar = out[Collective.ALLREDUCE]
    >>> ar.chosen.scheduler, ar.chosen.verified, ar.chosen.steps, ar.chosen.tau
    ('bfb', True, 8, Fraction(5, 2))
    """
    t0 = time.perf_counter()
    built = build_candidates(topology, costs, size_bytes, collectives=tuple(collectives), **kw)
    out = {c: choose(topology, c, cands, size_bytes, verify_mode=verify_mode) for c, cands in built.items()}
    for comparison in out.values():
        comparison.seconds = time.perf_counter() - t0
    return out


# ---------------------------------------------------------------------------------------------------
# one scheduler, both orientations
# ---------------------------------------------------------------------------------------------------
Builder = Callable[[Topology, LinkCosts, bool], tuple[Schedule, Fraction | None, float | None]]


def _bfb_builder(options: dict, reference: Topology | None) -> Builder:
    def build(g: Topology, _costs: LinkCosts, transposed: bool):
        if reference is not None and reference.translation is not None:
            r = bfb_allgather_near(g, reference.transpose() if transposed else reference, **options)
        else:
            r = bfb_allgather(g, **options)
        return r.schedule, r.tau, None
    return build


def _hetero_builder(size_bytes: float) -> Builder:
    def build(g: Topology, c: LinkCosts, _transposed: bool):
        r = bfb_heterogeneous(g, c.alpha_s, c.bandwidth_Bps, size_bytes)
        return r.schedule, None, r.predicted_time_s
    return build


def _trees_builder(size_bytes: float) -> Builder:
    def build(g: Topology, c: LinkCosts, _transposed: bool):
        return fastest_trees(pack_trees(g, c.bandwidth_Bps), c, size_bytes), None, None

    def allreduce_phases(g: Topology, c: LinkCosts) -> tuple[Schedule, Schedule]:
        return fastest_tree_allreduce(g, c, size_bytes)      # the set's pair, not the phases' own choices
    build.allreduce_phases = allreduce_phases                # type: ignore[attr-defined]
    return build


def _fast_links_builder() -> Builder:
    def build(_g: Topology, c: LinkCosts, _transposed: bool):
        return bfb_fast_links(c), None, None
    return build


def _greedy_builder(costs: LinkCosts, size_bytes: float, chunks: int, seed: int) -> Builder:
    def build(g: Topology, c: LinkCosts, _transposed: bool):
        r = tacos_allgather(g, c, size_bytes, layouts=chunk_options(g.nodes, chunks), seed=seed)
        return r.schedule, None, r.simulated_s          # its event simulation's time: the replay's is no longer
    return build


def _greedy_bounds(g: Topology, costs: LinkCosts, size_bytes: float, chunks: int) -> dict[Collective, float]:
    """Seconds a TACOS schedule takes at least: some node u receives the N - 1 other shards, at least one
    transfer each, over its in-links l (alpha_l + bytes / b_l each, one at a time per link), so
    T sum_l b_l >= (N - 1) (alpha_min b_min + M / N) (G^T's in-links, i.e. G's out-links, for the
    reduce-scatter)."""
    n = g.nodes
    other = g.tails != g.heads
    a = float(costs.alpha_s[other].min())

    def bound(ends) -> float:
        total = np.bincount(ends[other], weights=costs.bandwidth_Bps[other], minlength=n)
        low = np.full(n, np.inf)
        np.minimum.at(low, ends[other], costs.bandwidth_Bps[other])
        return float(((n - 1) * (a * low + size_bytes / n) / total).max())

    ag, rs = bound(g.heads), bound(g.tails)
    return {Collective.ALLGATHER: ag, Collective.REDUCESCATTER: rs, Collective.ALLREDUCE: ag + rs}


def _sum(a, b):
    return a + b if a is not None and b is not None else None


def _phase_candidate(made: dict, phase: Collective, name: str, schedule: Schedule) -> Candidate:
    """The candidate already made for this very phase schedule (checked once), else a new one."""
    c = made.get(phase)
    return c if c is not None and c.schedule is schedule else Candidate(name, schedule)


def _by_orientation(out: dict, name: str, g: Topology, costs: LinkCosts, size_bytes: float, build: Builder) -> None:
    """Allgather on G and, for reduce-scatter and allreduce, on G^T (its arcs priced as the arcs of G they
    reverse; G's own allgather when G^T = G on uniform links); then the wanted collectives, priced."""
    wanted = list(out)
    t0 = time.perf_counter()
    ag = ag_tau = ag_time = None
    if Collective.ALLGATHER in wanted or Collective.ALLREDUCE in wanted:
        ag, ag_tau, ag_time = build(g, costs, False)
    t_ag = time.perf_counter() - t0
    if Collective.REDUCESCATTER in wanted or Collective.ALLREDUCE in wanted:
        gt = g.transpose()
        if gt is g and ag is not None and costs.uniform_model is not None:
            base, rs_tau, rs_time = ag, ag_tau, ag_time
        else:
            base, rs_tau, rs_time = build(gt, costs.transposed(gt), True)
        rs = base.reverse(topology=g.expr)
    t_all = time.perf_counter() - t0
    made = {}
    for c in wanted:
        if c is Collective.ALLGATHER:
            made[c] = priced(name, ag, costs, size_bytes, t_ag, ag_tau, ag_time)
        elif c is Collective.REDUCESCATTER:
            made[c] = priced(name, rs, costs, size_bytes, t_all - t_ag, rs_tau, rs_time)
        elif (pair := getattr(build, "allreduce_phases", None)) is not None:
            t1 = time.perf_counter()
            rs_ar, ag_ar = pair(g, costs)              # phases chosen together (schedule_sets' allreduce)
            made[c] = priced(name, allreduce(rs_ar, ag_ar), costs, size_bytes, t_all + time.perf_counter() - t1,
                             None, None)
            made[c].phases = (_phase_candidate(made, Collective.REDUCESCATTER, name, rs_ar),
                              _phase_candidate(made, Collective.ALLGATHER, name, ag_ar))
        else:
            made[c] = priced(name, allreduce(rs, ag), costs, size_bytes, t_all, _sum(ag_tau, rs_tau),
                             _sum(ag_time, rs_time))
            # the allreduce is checked by its phases (the same schedule objects; see verify_allreduce_phases)
            made[c].phases = (made.get(Collective.REDUCESCATTER) or Candidate(name, rs),
                              made.get(Collective.ALLGATHER) or Candidate(name, ag))
        out[c].append(made[c])
