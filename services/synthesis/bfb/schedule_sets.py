"""Schedule sets by size (docs/concepts.md): per collective, size ranges [min_bytes, max_bytes) tiling [0, inf), each
served by the verified schedule fastest over the whole range among the candidates.

Candidates (each a schedule; its time T(M) on the links is convex piecewise linear in the size M: the
dependency-driven time, the time the runtimes realise, a max over paths of lines A + B M
(`schedule.dependency.dependency_curve`); beside it the step-synchronous price, one line a + b M on uniform
latencies (`schedule.envelope.curve`), reported as `barrier_time_us_*`):

- ``bfb``: LP (1) (paper section 6); or a prebuilt schedule such as an expression's own construction;
- ``bfb-hetero@SIZE``: LP (14) solved at 1 MiB and at 1 GiB, when the links differ (App. E.3);
- ``bfb-fast``: LP (1) without the slower links, when they differ and the rest stays connected;
- ``greedy/P@SIZE``: TACOS (event-driven link-chunk matching) on the links at 1 MiB and at 1 GiB, P blocks
  per shard (P in `greedy_chunks`) and its chunk layout chosen on its simulated time at that size;
- ``trees/P``: the tree packing (`forest`) pipelined over P chunks, P = 1, 2, 4, ... while the schedule
  stays within its transfer limit: every P is a different trade of steps against pipeline fill;
- ``trees/stream@SIZE``: the same trees run event-driven on the links at 1 MiB and at 1 GiB (`forest.stream`: each
  arc forwards what has arrived the moment it is free, in batched messages), pieces, message cap and priority
  chosen on its simulated time (= its dependency-driven time) at that size.

Discrete BFB (App. E.2, BFB's chunks rounded to P per shard) is not a candidate: it has BFB's steps and a
tau no smaller than LP (1)'s, so it is never faster than ``bfb`` at any size.

Reduce-scatters are the candidates' allgathers on G^T reversed (Theorem 1). An allreduce is a reduce-scatter
then an allgather with no barrier between them (a shard's allgather starts when its owner's sum is complete),
so its time is not the sum of the phases' times: every pair (RS_i, AG_j) of the schedules the two phase sets
serve is priced as one composed schedule, and the allreduce's ranges are the lower envelope of those curves;
its phases may come from different schedulers (named ``rs+ag``). The fastest candidate per interval is the
lower envelope of the curves, with crossovers exact (`envelope.lower_envelope`); every schedule a range serves is
model-checked, and a candidate that fails is dropped and the envelope recomputed (a scheduler bug is never
served); a schedule the caller already model-checked on the same topology (`checked`: a revision's served
schedules, checked by `bfb.compare.choose`) is not checked again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import numpy as np

from services.synthesis.bfb.greedy import chunk_options, tacos_allgather
from services.synthesis.bfb.hetero import bfb_heterogeneous
from services.synthesis.bfb.incremental import bfb_allgather_near
from services.synthesis.bfb.lp import ScheduleTooLarge, bfb_allgather
from services.synthesis.bfb.fast_links import FastLinksUnavailable, bfb_fast_links
from services.synthesis.forest.packing import pack_trees
from services.synthesis.forest.pipeline import max_chunks, pipelined_allgather
from services.synthesis.forest.stream import fastest_stream
from services.synthesis.schedule.cost import measured_tau
from services.synthesis.schedule.dependency import dependency_curve, dependency_time
from services.synthesis.schedule.envelope import Curve, curve, integer_ranges, lower_envelope
from services.synthesis.schedule.ir import Collective, Schedule, allreduce
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.graph import Topology

__all__ = ["SizeRange", "ScheduleSet", "schedule_sets", "SET_SCHEDULERS", "MAX_TREE_CHUNKS", "tree_chunk_options",
           "tree_candidates", "fastest_trees", "fastest_tree_allreduce"]

SET_SCHEDULERS = ("bfb", "bfb-hetero", "bfb-fast", "greedy", "trees")
MAX_TREE_CHUNKS = 512
MIN_PIPELINE_CHUNKS = 16
HETERO_SIZES = (1 << 20, 1 << 30)


@dataclass
class SizeRange:
    """Sizes [min_bytes, max_bytes) (max None: unbounded) served by `schedule` of `scheduler`."""

    min_bytes: int
    max_bytes: int | None
    scheduler: str
    schedule: Schedule
    curve: Curve                               # dependency-driven time (served)
    verified: bool
    phases: tuple["SizeRange", "SizeRange"] | None = field(default=None, repr=False)
    barrier: Curve | None = field(default=None, repr=False)      # step-synchronous price

    @property
    def steps(self) -> int:
        return int(np.count_nonzero(np.diff(self.schedule.step_ptr)))

    def tau(self, degree: int) -> Fraction:
        return measured_tau(self.schedule, degree)

    def time_s(self, size_bytes: float) -> float:
        """The schedule's dependency-driven time at this size (its curve, exactly)."""
        return float(self.curve(Fraction(size_bytes)))

    def barrier_time_s(self, size_bytes: float) -> float:
        """The schedule's step-synchronous price at this size (`LinkCosts.time`, exactly)."""
        return float(self.barrier(Fraction(size_bytes)))

    def time_pieces(self) -> list[list[float]]:
        """The served time's pieces [start bytes, latency us, us per byte]: T(M) = a + b M from each start on."""
        return [[float(x), float(a) * 1e6, float(b) * 1e6] for x, a, b in
                zip(self.curve.starts, self.curve.a, self.curve.b)]

    def as_dict(self, degree: int) -> dict:
        tau = self.tau(degree)
        last = None if self.max_bytes is None else self.max_bytes - 1
        out = {"min_bytes": self.min_bytes, "max_bytes": self.max_bytes, "scheduler": self.scheduler,
               "steps": self.steps, "tau": float(tau), "tau_exact": str(tau), "verified": self.verified,
               "time_us_at_min_bytes": self.time_s(self.min_bytes) * 1e6,
               "time_us_at_max_bytes": None if last is None else self.time_s(last) * 1e6,
               "barrier_time_us_at_min_bytes": self.barrier_time_s(self.min_bytes) * 1e6,
               "barrier_time_us_at_max_bytes": None if last is None else self.barrier_time_s(last) * 1e6,
               "time_pieces": self.time_pieces()}
        if self.phases is not None:
            out["phases"] = [self.phases[0].scheduler, self.phases[1].scheduler]
        return out


@dataclass
class ScheduleSet:
    """One collective's ranges, in order, tiling [0, inf)."""

    topology: Topology
    collective: Collective
    ranges: list[SizeRange]
    candidates: list[str]
    seconds: float = 0.0

    def at(self, size_bytes: float) -> SizeRange:
        """The range holding `size_bytes`."""
        for r in self.ranges:
            if r.max_bytes is None or size_bytes < r.max_bytes:
                return r
        raise AssertionError("ranges tile [0, inf)")

    def time_s(self, size_bytes: float) -> float:
        return self.at(size_bytes).time_s(size_bytes)

    def as_dict(self) -> dict:
        d = self.topology.degree
        return {"collective": self.collective.value, "candidates": self.candidates,
                "by_size": [r.as_dict(d) for r in self.ranges], "seconds": round(self.seconds, 6)}


Make = Callable[[], Schedule]


def _allgathers(g: Topology, costs: LinkCosts, schedulers, greedy_chunks, bfb_options, reference,
                skipped: dict) -> list[tuple[str, Make]]:
    """(name, schedule maker) of every candidate allgather on g; a maker may be called more than once."""
    out: list[tuple[str, Make]] = []
    uniform = costs.uniform_model is not None

    def keep(name: str, make: Make) -> None:
        try:
            s = make()
        except (ScheduleTooLarge, FastLinksUnavailable) as exc:
            skipped[name] = str(exc)
            return
        out.append((name, lambda s=s: s))

    if "bfb" in schedulers:
        if reference is not None and reference.translation is not None:
            keep("bfb", lambda: bfb_allgather_near(g, reference, **bfb_options).schedule)
        else:
            keep("bfb", lambda: bfb_allgather(g, **bfb_options).schedule)
    if "bfb-hetero" in schedulers and not uniform:
        for size in HETERO_SIZES:
            keep(f"bfb-hetero@{_size_name(size)}",
                 lambda size=size: bfb_heterogeneous(g, costs.alpha_s, costs.bandwidth_Bps, size).schedule)
    if "bfb-fast" in schedulers and not uniform:
        keep("bfb-fast", lambda: bfb_fast_links(costs, **bfb_options))
    if "greedy" in schedulers:
        for p in greedy_chunks:
            layouts = chunk_options(g.nodes, p)
            if not layouts:
                skipped[f"greedy/{p}"] = "more transfers than the TACOS scheduler's limit"
                continue
            for size in HETERO_SIZES:
                keep(f"greedy/{p}@{_size_name(size)}", lambda p=p, size=size, layouts=layouts: tacos_allgather(
                    g, costs, size, layouts=layouts).schedule)
    if "trees" in schedulers:
        try:
            pk = pack_trees(g, costs.bandwidth_Bps)
        except ScheduleTooLarge as exc:
            skipped["trees"] = str(exc)
        else:
            out.extend(tree_candidates(pk, costs))
    return out


def tree_candidates(packing, costs: LinkCosts) -> list[tuple[str, Make]]:
    """(name, maker) of every tree schedule offered: ``trees/P`` pipelined (rebuilt when served) and
    ``trees/stream@SIZE`` event-driven at 1 MiB and 1 GiB (built once)."""
    out: list[tuple[str, Make]] = [(f"trees/{p}", lambda p=p: pipelined_allgather(packing, p))
                                   for p in tree_chunk_options(packing)]
    for size in HETERO_SIZES:
        s = fastest_stream(packing, costs, size).schedule
        out.append((f"trees/stream@{_size_name(size)}", lambda s=s: s))
    return out


def tree_chunk_options(packing) -> list[int]:
    """The pipeline chunk counts the tree packing is offered at: P = 1, 2, 4, ... up to its transfer limit
    and MAX_TREE_CHUNKS (each a different trade of steps against pipeline fill). When the limit allows fewer than
    MIN_PIPELINE_CHUNKS, only P = 1 (the fewest steps, for small sizes): the lockstep fill costs about
    (H - 1) / (2 P) of the bandwidth term (`forest.pipeline`; 1.39x at P = 4 on a 32 x 32 torus), which the
    event-driven run of the same trees (`forest.stream`) does not pay."""
    top = min(max_chunks(packing), MAX_TREE_CHUNKS)
    if top < MIN_PIPELINE_CHUNKS:
        return [1]
    out, p = [], 1
    while p <= top:
        out.append(p)
        p *= 2
    return out


def fastest_trees(packing, costs: LinkCosts, size_bytes: float) -> Schedule:
    """The tree schedule a schedule set serves at `size_bytes` among the trees (the option of `tree_candidates`
    with the lowest dependency-driven time on `costs` there, exactly as the set prices its candidates; the first,
    fewer chunks, on a tie): `fabricplan schedule --links --size M` serves the same one."""
    best = None
    for _name, make in tree_candidates(packing, costs):
        s = make()
        t = dependency_time(s, costs, size_bytes)                   # one pricing (the curve's value there)
        if best is None or t < best[0]:
            best = (t, s)
    assert best is not None
    return best[1]


def _served_trees(scheds: list[Schedule], costs: LinkCosts) -> list[Schedule]:
    """Those of `scheds` (one phase's tree schedules, `tree_candidates`) that its phase set serves somewhere: the
    ones on the lower envelope of their dependency-driven curves on `costs` (as `_phase_set` finds its ranges)."""
    spans = lower_envelope([dependency_curve(s, costs) for s in scheds])
    return [scheds[k] for k in sorted({k for _, _, k in integer_ranges(spans)})]


def fastest_tree_allreduce(topology: Topology, costs: LinkCosts, size_bytes: float) -> tuple[Schedule, Schedule]:
    """(reduce-scatter, allgather) of the tree allreduce a schedule set serves at `size_bytes` among the trees:
    every pair of the tree schedules its phase sets serve (`tree_candidates`, pipelined and event-driven; the
    reduce-scatters built on G^T and reversed, as the set builds them), composed without a barrier (`_pairs`)
    and the lowest dependency-driven time at the size taken (fewer chunks on a tie). The phases' own fastest
    options at the size are not it: the composition overlaps the reduce-scatter's tail with the allgather's
    head, so e.g. on torus(4, 4) with five of its arcs at a quarter of the bandwidth, at 1 MiB, the set's pair
    is 2.3 % faster than the two phases chosen apart. `fabricplan schedule --links --size M` serves this pair."""
    gt = topology.transpose()
    gt_costs = costs.transposed(gt)
    rs = _served_trees([make().reverse(topology=topology.expr)
                        for _, make in tree_candidates(pack_trees(gt, gt_costs.bandwidth_Bps), gt_costs)], costs)
    ag = _served_trees([make() for _, make in tree_candidates(pack_trees(topology, costs.bandwidth_Bps), costs)],
                       costs)
    m = Fraction(size_bytes)
    best = min(((dependency_curve(allreduce(a, b), costs)(m), i, j) for i, a in enumerate(rs) for j, b in enumerate(ag)))
    return rs[best[1]], ag[best[2]]


def _size_name(size: int) -> str:
    for unit, name in ((1 << 30, "1GiB"), (1 << 20, "1MiB"), (1 << 10, "1KiB")):
        if size == unit:
            return name
    return str(size)


def _phase_set(topology: Topology, costs: LinkCosts, collective: Collective, cands: list[tuple[str, Make]],
               checked: frozenset[int] = frozenset()) -> tuple[list[SizeRange], list[str]]:
    """The ranges of an allgather or a reduce-scatter from (name, maker of a schedule of it) candidates; a
    schedule whose id() is in `checked` passed the model checker already."""
    curves, barriers, makers, names = [], [], [], []
    for name, make in cands:
        s = make()
        curves.append(dependency_curve(s, costs))
        barriers.append(curve(s, costs))
        makers.append(make)
        names.append(name)
    alive = list(range(len(names)))
    while True:
        if not alive:
            raise ValueError(f"{topology.expr}: no {collective.value} candidate passed the model checker")
        spans = lower_envelope([curves[i] for i in alive])
        ranges, failed = [], None
        for lo, hi, k in integer_ranges(spans):
            i = alive[k]
            s = makers[i]()
            known = id(s) in checked and s.collective is collective
            if not known and not verify(s, topology, collective).ok:
                failed = i
                break
            ranges.append(SizeRange(lo, hi, names[i], s, curves[i], True, barrier=barriers[i]))
        if failed is None:
            return ranges, names
        alive.remove(failed)


def schedule_sets(topology: Topology, costs: LinkCosts, collectives=(Collective.ALLGATHER,
                  Collective.REDUCESCATTER, Collective.ALLREDUCE), *, schedulers=SET_SCHEDULERS,
                  greedy_chunks=(1, 4), bfb_options: dict | None = None, reference: Topology | None = None,
                  prebuilt: dict | None = None, built: dict | None = None,
                  checked=()) -> dict[Collective, ScheduleSet]:
    """The schedule set of every collective wanted (see the module docstring).

    Parameters
    ----------
    topology : Topology
    costs : LinkCosts
        Per-arc latency and bandwidth (`LinkCosts.uniform` for the alpha-beta model).
    collectives : iterable of Collective
        Allgather, reduce-scatter and/or allreduce.
    schedulers : iterable of str
        Any of SET_SCHEDULERS.
    greedy_chunks : iterable of int
        Chunk counts of the greedy candidates.
    bfb_options : dict
        Passed to LP (1) (workers, shortcut).
    reference : Topology
        A vertex-transitive topology `topology` differs from in a few arcs (BFB solves the changed receivers).
    prebuilt : dict
        name -> allgather schedule on `topology` (e.g. an expression's construction), a candidate too.
    built : dict
        Collective.ALLGATHER / REDUCESCATTER -> [(name, schedule of that collective on `topology`)]: candidates
        built elsewhere (e.g. `compare`'s), added as they are.
    checked : iterable of Schedule
        Schedules of `built` that passed the model checker on `topology` as their collective (the very
        objects, e.g. `compare.choose`'s verified choices): not checked again.

    Examples
    --------
    >>> from services.synthesis.schedule.cost import LinkModel
    >>> from services.synthesis.topology.catalog import build
    >>> g = build("torus(3, 4)")
    >>> sets = schedule_sets(g, LinkCosts.uniform(g, LinkModel.from_units(10, 100)), [Collective.ALLGATHER],
    ...                      schedulers=("bfb", "trees"))
    >>> [(r.min_bytes, r.max_bytes, r.scheduler) for r in sets[Collective.ALLGATHER].ranges]
    [(0, None, 'bfb')]
    """
    t0 = time.perf_counter()
    collectives = tuple(collectives)
    unknown = set(schedulers) - set(SET_SCHEDULERS)
    if unknown:
        raise ValueError(f"unknown scheduler {sorted(unknown)[0]!r}; known: {', '.join(SET_SCHEDULERS)}")
    if Collective.ALLTOALL in collectives:
        raise ValueError("schedule sets cover allgather, reduce-scatter and allreduce")
    for p in greedy_chunks:
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise ValueError(f"greedy chunks must be positive integers, got {p!r}")
    opts = bfb_options or {}
    checked = tuple(checked)                # held here, so the ids below stay theirs for the whole call
    seen = frozenset(id(x) for x in checked)
    skipped: dict[str, str] = {}
    want_ag = Collective.ALLGATHER in collectives or Collective.ALLREDUCE in collectives
    want_rs = Collective.REDUCESCATTER in collectives or Collective.ALLREDUCE in collectives
    pre = [(name, lambda s=s: s) for name, s in (prebuilt or {}).items()]
    phase: dict[Collective, list[SizeRange]] = {}
    names: dict[Collective, list[str]] = {}
    ready = {c: [(name, lambda s=s: s) for name, s in lst] for c, lst in (built or {}).items()}
    if want_ag:
        cands = ready.get(Collective.ALLGATHER, []) + pre + _allgathers(
            topology, costs, schedulers, greedy_chunks, opts, reference, skipped)
        phase[Collective.ALLGATHER], names[Collective.ALLGATHER] = _phase_set(
            topology, costs, Collective.ALLGATHER, cands, seen)
    if want_rs:
        gt = topology.transpose()
        ref_t = reference.transpose() if reference is not None else None
        cands = _allgathers(gt, costs.transposed(gt), schedulers, greedy_chunks, opts, ref_t, skipped)
        if gt is topology:
            cands = pre + cands
        rev = [(name, lambda make=make: make().reverse(topology=topology.expr)) for name, make in cands]
        phase[Collective.REDUCESCATTER], names[Collective.REDUCESCATTER] = _phase_set(
            topology, costs, Collective.REDUCESCATTER, ready.get(Collective.REDUCESCATTER, []) + rev, seen)
    out: dict[Collective, ScheduleSet] = {}
    for c in collectives:
        ranges = _pairs(costs, phase[Collective.REDUCESCATTER], phase[Collective.ALLGATHER]) \
            if c is Collective.ALLREDUCE else phase[c]
        listed = names[Collective.ALLGATHER] if c is Collective.ALLREDUCE else names[c]
        out[c] = ScheduleSet(topology, c, ranges, listed + [f"{k} (skipped: {v})" for k, v in skipped.items()])
    for s in out.values():
        s.seconds = time.perf_counter() - t0
    return out


def _pairs(costs: LinkCosts, rs: list[SizeRange], ag: list[SizeRange]) -> list[SizeRange]:
    """Allreduce ranges: every pair of a reduce-scatter and an allgather the phase sets serve, composed (RS
    then AG, no barrier between) and priced as one schedule; the lower envelope of those curves. Both phases
    verified implies the composition is (`verify.verify_allreduce_phases`)."""
    rs_u = list({id(r.schedule): r for r in rs}.values())
    ag_u = list({id(r.schedule): r for r in ag}.values())
    pairs = [(a, b, allreduce(a.schedule, b.schedule)) for a in rs_u for b in ag_u]
    curves = [dependency_curve(s, costs) for _, _, s in pairs]
    out: list[SizeRange] = []
    for lo, hi, k in integer_ranges(lower_envelope(curves)):
        a, b, s = pairs[k]
        name = a.scheduler if a.scheduler == b.scheduler else f"{a.scheduler}+{b.scheduler}"
        out.append(SizeRange(lo, hi, name, s, curves[k], a.verified and b.verified, (a, b),
                             barrier=a.barrier + b.barrier))
    return out
