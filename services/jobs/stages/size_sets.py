"""Schedule sets by size in plans and revisions (docs/concepts.md): per collective, the size ranges served, each with
its verified schedule stored as an artifact, and the predicted times they give.

A plan's schedules are its topology's construction. When the allgather and the reduce-scatter have D(G)
steps (no allgather has fewer: a shard crosses one link per step) and Theorem 4's tau (no schedule has a
smaller one: `cost.tau_lower_bound`), nothing is faster at any size and the set is that one range; otherwise,
on topologies up to MAX_PACKING_NODES nodes, the greedy scheduler (1 and 4 chunks) and the tree packing are
candidates too (larger plans keep the construction's one range).

A revision's comparison (`bfb.degraded`) builds BFB and the greedy scheduler at one size; the set adds the
greedy scheduler at 4 chunks per shard and the pipelined tree packing (topologies up to
MAX_PACKING_NODES nodes) and keeps, on every size range, the fastest verified schedule among all of them
(`bfb.schedule_sets`; exact crossovers on the plan's uniform links; the schedules the comparison served are
model-checked there once, not again for the set). Range i of collective c is stored as the
artifact `<prefix>schedule:<c>@<i>` and listed as `schedules.<c>.by_size[i]` = {min_bytes, max_bytes (None
for the last), scheduler, steps, tau, tau_exact, verified, time_pieces}; the revision view adds each range's `url`.
`time_pieces` is the range's served time as a function of the size, the dependency-driven time (DESIGN section 2;
`schedule.dependency`): [start bytes, latency us, us per byte] pieces, T(M) = a + b M from each start on; the
step-synchronous price is steps alpha + tau M/B on the plan's uniform links (`set_barrier_time_us`).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from services.store import repo
from services.synthesis.bfb.schedule_sets import ScheduleSet, schedule_sets
from services.synthesis.forest.packing import MAX_PACKING_NODES
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective

__all__ = ["revision_sets", "plan_sets", "store_sets", "set_time_us", "set_barrier_time_us", "range_name", "encoder"]


def range_name(prefix: str, collective: str, index: int) -> str:
    """The artifact name of range `index` of `collective`'s set."""
    return f"{prefix}schedule:{collective}@{index}"


def revision_sets(degraded, reference=None) -> dict[Collective, ScheduleSet]:
    """The schedule sets of a degraded topology from its comparison (`bfb.degraded.DegradedSchedules`), with
    the greedy scheduler at 4 chunks and the tree packing added on topologies up to MAX_PACKING_NODES nodes."""
    g = degraded.topology
    phases = (Collective.ALLGATHER, Collective.REDUCESCATTER)
    built = {c: [(x.scheduler, x.schedule) for x in degraded.comparisons[c].candidates if x.schedule is not None]
             for c in phases}
    # the comparison model-checked the schedules it serves (and with verify_mode "all", every candidate): the
    # set does not check them again
    checked = [x.schedule for c in phases for x in degraded.comparisons[c].candidates
               if x.verified and x.schedule is not None]
    small = g.nodes <= MAX_PACKING_NODES
    sets = schedule_sets(g, degraded.costs, schedulers=("greedy", "trees") if small else (),
                         greedy_chunks=(4,) if small else (), built=built, bfb_options={"workers": 1},
                         reference=reference, checked=checked)
    served = degraded.comparisons.get(Collective.ALLREDUCE)
    if served is not None and served.chosen.phases:
        rs, ag = served.chosen.phases
        _hold_allreduce(sets, served.chosen.schedule, rs.schedule, ag.schedule)
    return sets


def _hold_allreduce(sets: dict[Collective, ScheduleSet], allreduce_schedule, rs, ag) -> None:
    """An allreduce range whose phases are the very two schedules `allreduce_schedule` composes (`rs` then `ag`,
    the same objects) holds that object itself, so a store encodes it once (`encoder`)."""
    for r in sets[Collective.ALLREDUCE].ranges if Collective.ALLREDUCE in sets else ():
        if r.phases and r.phases[0].schedule is rs and r.phases[1].schedule is ag:
            r.schedule = allreduce_schedule


def plan_sets(topology, link: LinkModel, schedules: dict) -> dict[Collective, ScheduleSet]:
    """The schedule sets of a plan whose verified schedules are `schedules` (Collective -> Schedule): the
    construction's allgather and reduce-scatter are candidates the set does not model-check again, and an
    allreduce range composed of them holds the plan's allreduce object (`_hold_allreduce`)."""
    from services.synthesis.schedule.cost import measured_tau, tau_lower_bound
    from services.synthesis.schedule.links import LinkCosts

    costs = LinkCosts.uniform(topology, link)
    ag, rs = schedules[Collective.ALLGATHER], schedules[Collective.REDUCESCATTER]
    bound = tau_lower_bound(topology.nodes, topology.degree, topology.min_in_links)
    bound_t = tau_lower_bound(topology.nodes, topology.degree, topology.transpose().min_in_links)
    optimal = all(int(np.count_nonzero(np.diff(s.step_ptr))) == topology.diameter for s in (ag, rs)) \
        and measured_tau(ag, topology.degree) == bound and measured_tau(rs, topology.degree) == bound_t
    small = topology.nodes <= MAX_PACKING_NODES and not optimal
    sets = schedule_sets(topology, costs, schedulers=("greedy", "trees") if small else (),
                         greedy_chunks=(1, 4) if small else (), bfb_options={"workers": 1},
                         built={Collective.ALLGATHER: [("construction", ag)],
                                Collective.REDUCESCATTER: [("construction", rs)]}, checked=(ag, rs))
    if Collective.ALLREDUCE in schedules:
        _hold_allreduce(sets, schedules[Collective.ALLREDUCE], rs, ag)
    return sets


def encoder():
    """`Schedule.to_bytes` remembered per schedule object (a plan or a revision stores its served schedules and
    the ranges of its sets, mostly the same objects: each is encoded once, about 0.2 s at N = 1024)."""
    done: dict[int, tuple[object, bytes]] = {}

    def encode(schedule) -> bytes:
        hit = done.get(id(schedule))
        if hit is None or hit[0] is not schedule:
            hit = done[id(schedule)] = (schedule, schedule.to_bytes())      # held: the id stays this object's
        return hit[1]
    return encode


def store_sets(s, plan_id: str, prefix: str, sets: dict[Collective, ScheduleSet],
               encode=None) -> dict[str, list[dict]]:
    """Store every range's schedule (content-addressed; `encode`: a schedule's blob, `encoder()`, shared with the
    caller that stored the served schedules) and attach it; returns the `by_size` lists."""
    encode = encode or encoder()
    out = {}
    for c, ss in sets.items():
        rows = []
        for i, r in enumerate(ss.ranges):
            tau = r.tau(ss.topology.degree)
            row = {"min_bytes": r.min_bytes, "max_bytes": r.max_bytes, "scheduler": r.scheduler, "steps": r.steps,
                   "tau": float(tau), "tau_exact": str(tau), "verified": r.verified, "time_pieces": r.time_pieces()}
            digest = repo.put_blob(s, encode(r.schedule), "schedule", "application/x-npz", compress=False)
            repo.attach(s, plan_id, range_name(prefix, c.value, i), digest, row)
            rows.append(row)
        out[c.value] = rows
    return out


def _row_at(by_size: list[dict], size_bytes: float) -> dict:
    for row in by_size:
        if row["max_bytes"] is None or size_bytes < row["max_bytes"]:
            return row
    raise ValueError("the ranges do not cover the size")


def set_time_us(link: LinkModel, by_size: list[dict], size_bytes: float) -> float:
    """The served time (us) of the range holding `size_bytes`: its dependency-driven time (`time_pieces`); a row
    stored before that time existed has only steps and tau: steps alpha + tau M/B."""
    row = _row_at(by_size, size_bytes)
    pieces = row.get("time_pieces")
    if not pieces:
        return link.time(row["steps"], Fraction(row["tau_exact"]), size_bytes) * 1e6
    start, a, b = max((p for p in pieces if p[0] <= size_bytes), key=lambda p: p[0], default=pieces[0])
    return a + b * size_bytes


def set_barrier_time_us(link: LinkModel, by_size: list[dict], size_bytes: float) -> float:
    """The step-synchronous price (us) of the range holding `size_bytes`: steps alpha + tau M/B (uniform links)."""
    row = _row_at(by_size, size_bytes)
    return link.time(row["steps"], Fraction(row["tau_exact"]), size_bytes) * 1e6
