"""Plan revisions (DESIGN 4.9; issue 14): a done plan after link failures, and back after a repair.

A plan's topology, schedules and artifacts belong to a revision. Revision 0 is the plan as it was made; every
failure report that names links not yet failed makes the next revision (`kind` failure), with every link
failed so far removed:

    report (PUT /v1/panels/{id}/state "degraded", or POST /v1/plans/{id}/failures)
      -> a queued revision row (the request only records it, 202)
      -> worker: repair -> schedules -> finish                (workers.tasks.revision_workflow)

- **repair** (first, so a patch panel's robot starts at once): with `repair` requested and the plan bound to
  a fabric, every arc on a faulty panel port is wired again on spare ports of its hosts (services.fabric.
  repair): new cross-connects, new panel config versions, a `repairs` row pending until the panels apply them.
- **schedules**: the degraded topology (the failed arcs removed) and its allgather, reduce-scatter and
  allreduce schedules from `bfb.degraded.degraded_schedules` (BFB and the greedy scheduler priced at the
  workload's mean size, the faster verified one served; every served schedule passes the model checker),
  stored as artifacts under the revision's prefix ("rev{n}:schedule:allreduce", ...), with link loads checked
  against the measured tau (planner.link_loads_blob) and the topology as JSON and GraphML. The XML compile
  stage of the plan pipeline belongs between this stage and finish (the state carries each schedule's digest
  as the plan's `stage_schedules` does).
- **finish**: predicted times per collective and size, the workload time, and the cost of the failure
  against revision 0 and against the naive fallback, a ring over the surviving links.

When every panel of the plan has applied a pending repair, the plan gets a `restored` revision on the full
topology; its schedules and artifacts are revision 0's (nothing to build, so it is recorded in the panel
report's transaction). The current revision - what the scheduler should run - is the highest-numbered done
revision (0 when there is none); old revisions stay and are listed. A revision is a job like a plan (outbox,
attempts, heartbeats: services.store.jobs), and a finished revision is never written again.
"""
from __future__ import annotations

import json
import time
from fractions import Fraction

import numpy as np
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from .config import get_settings
from .store import jobs, notify, repo
from .store.db import session_scope
from .workloads import message_sizes
from .store.models import (PanelConfig, PanelRow, Plan, PlanBinding, PlanEvent, PlanRevision, PortFault,
                           Repair, utcnow)

__all__ = ["RevisionError", "RevisionConflict", "MAX_FAILED_LINKS", "report_failures", "record_faults",
           "clear_faults", "failure_matcher", "panel_failures", "repairs_applied", "stage_repair", "stage_schedules", "stage_finish",
           "fail", "current_number", "revision_view", "revision_summary", "plan_revision_ref", "artifact_link"]

MAX_FAILED_LINKS = 1024


class RevisionError(ValueError):
    """A failure report that names something wrong (`loc`: where, the message: why): HTTP 422."""

    def __init__(self, loc: tuple, msg: str):
        self.loc, self.msg = tuple(loc), msg
        super().__init__(msg)


class RevisionConflict(Exception):
    """A failure report the plan cannot take now (not done yet): HTTP 409."""


def _url() -> str:
    return get_settings().sqlalchemy_url


def _arc_text(t: int, h: int) -> str:
    return f"{t}>{h}"


# ---------------------------------------------------------------------------------------------------
# request side: recording failures (cheap, in the caller's transaction)
# ---------------------------------------------------------------------------------------------------
def plan_arcs(s, plan: Plan) -> np.ndarray:
    """The plan's topology arcs (tail, head, lane) in arc order, from its stored topology artifact."""
    link = repo.plan_artifact(s, plan.id, "topology")
    if link is None:
        raise RevisionConflict(f"plan {plan.id} has no stored topology")
    data = json.loads(repo.get_blob(s, link.digest)[0])
    return np.asarray(data["arcs"], dtype=np.int64).reshape(-1, 3)


def latest(s, plan_id: str) -> PlanRevision | None:
    return s.scalar(select(PlanRevision).where(PlanRevision.plan_id == plan_id)
                    .order_by(PlanRevision.number.desc()).limit(1))


def resolve_links(arcs: np.ndarray, links: list[dict], failed: set[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """(tail, head, lane) of each reported link ({"arc": "t>h", "lane": l or None}); without a lane, the
    highest lane of t>h not failed yet. Raises RevisionError naming the entry."""
    if len(links) > MAX_FAILED_LINKS:
        raise RevisionError(("body", "links"), f"{len(links)} links; at most {MAX_FAILED_LINKS} per report")
    taken = set(failed)
    out = []
    for i, entry in enumerate(links):
        text = entry["arc"]
        try:
            t, h = (int(x) for x in text.split(">"))
        except ValueError:
            raise RevisionError(("body", "links", i, "arc"), f"an arc is written tail>head, e.g. 0>1; got {text!r}") from None
        lanes = arcs[(arcs[:, 0] == t) & (arcs[:, 1] == h), 2]
        if lanes.size == 0:
            raise RevisionError(("body", "links", i, "arc"), f"the plan's topology has no arc {text}")
        if t == h:
            raise RevisionError(("body", "links", i, "arc"), f"{text} is a self-loop: it carries no data")
        lane = entry.get("lane")
        if lane is None:
            free = [int(x) for x in sorted(lanes, reverse=True) if (t, h, int(x)) not in taken]
            lane = free[0] if free else int(lanes.max())
        elif lane not in lanes:
            raise RevisionError(("body", "links", i, "lane"), f"arc {text} has lanes 0..{lanes.size - 1}, got {lane}")
        taken.add((t, h, int(lane)))
        out.append((t, h, int(lane)))
    return out


def _strongly_connected(nodes: int, arcs: np.ndarray, failed: set) -> bool:
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    key = lambda t, h, lane: (np.asarray(t, dtype=np.int64) * nodes + h) * 64 + lane    # noqa: E731 (lanes < 64)
    gone = np.array([key(*f) for f in failed], dtype=np.int64)
    keep = ~np.isin(key(arcs[:, 0], arcs[:, 1], arcs[:, 2]), gone)
    adj = csr_matrix((np.ones(int(keep.sum()), dtype=np.int8), (arcs[keep, 0], arcs[keep, 1])), shape=(nodes, nodes))
    return connected_components(adj, directed=True, connection="strong")[0] == 1


def _cabling(binding: PlanBinding | None):
    """A function from an arc (tail, head, lane) to where the binding cables it (empty when the plan is not
    bound). One pass over the assignment, then a dictionary look-up per arc."""
    if binding is None or binding.released:
        return lambda triple: {}
    asg, hosts = binding.assignment["arcs"], binding.assignment["hosts"]
    index = {(t, h, lane): i for i, (t, h, lane) in enumerate(zip(asg["tail"], asg["head"], asg["lane"]))}

    def where(triple) -> dict:
        i = index.get(tuple(int(x) for x in triple))
        if i is None:
            return {}
        t, h = asg["tail"][i], asg["head"][i]
        return {"panel": asg["panel"][i], "ingress": asg["ingress"][i], "egress": asg["egress"][i],
                "tx_host": hosts[t], "tx_port": asg["tx_port"][i], "rx_host": hosts[h], "rx_port": asg["rx_port"][i]}
    return where


def record_faults(s, panel_id: str, version: int, items, source: str) -> None:
    """Mark panel ports faulty: items are (side, port) pairs (a failed cross-connect gives both of its)."""
    for side, port in items:
        row = s.get(PortFault, (panel_id, side, int(port)))
        if row is None:
            s.add(PortFault(panel_id=panel_id, side=side, port=int(port), version=version, source=source))
        else:
            row.version, row.source, row.reported_at = version, source, utcnow()
    s.flush()


def clear_faults(s, panel_id: str, connections: list[dict]) -> None:
    """An agent reported `connections` applied and working: their ports are healthy again."""
    ing = {int(c["ingress"]) for c in connections}
    eg = {int(c["egress"]) for c in connections}
    for f in list(s.scalars(select(PortFault).where(PortFault.panel_id == panel_id))):
        if (f.side == "ingress" and f.port in ing) or (f.side == "egress" and f.port in eg):
            s.delete(f)
    s.flush()


def report_failures(s, plan: Plan, links: list[dict] | list[tuple], *, source: str, repair: bool = True,
                    message: str | None = None, panel: str | None = None,
                    version: int | None = None) -> tuple[PlanRevision | None, bool]:
    """Record failed links of a done plan: a new queued revision when they include links not failed yet.

    `links` are API entries ({"arc": "t>h", "lane": l}) or (tail, head, lane) triples (panel reports).
    Returns (the new revision, True), or (the latest revision or None, False) when nothing is new. Raises
    RevisionConflict (the plan is not done), RevisionError (an arc it lacks, or a failure that leaves the
    topology not strongly connected)."""
    if plan.status != "done":
        raise RevisionConflict(f"plan {plan.id} is {plan.status}; report failures of a done plan")
    s.execute(select(Plan.id).where(Plan.id == plan.id).with_for_update())    # one report at a time (PostgreSQL)
    arcs = plan_arcs(s, plan)
    last = latest(s, plan.id)
    before = {tuple(x) for x in (last.failed if last is not None else [])}
    if links and isinstance(links[0], dict):
        triples = resolve_links(arcs, links, before)
    else:
        triples = [tuple(int(x) for x in t) for t in links]
    new = sorted(set(triples) - before)
    if not new:
        return last, False
    failed = before | set(new)
    nodes = int(plan.request["nodes"])
    if not _strongly_connected(nodes, arcs, failed):
        raise RevisionError(("body", "links"), f"without these links the plan's topology would not be strongly "
                                               f"connected ({len(failed)} links failed in all): no schedule can run "
                                               "on it; plan the job again")
    binding = s.get(PlanBinding, plan.id)
    where = _cabling(binding)
    physical = [{"arc": _arc_text(t, h), "lane": lane, **where((t, h, lane))} for t, h, lane in new]
    if source == "scheduler":          # the link is down somewhere on its path: neither panel port is trusted
        for p in physical:
            if "panel" in p:
                record_faults(s, p["panel"], 0, [("ingress", p["ingress"]), ("egress", p["egress"])], source)
    number = (last.number if last is not None else 0) + 1
    cause = {"source": source, "links": physical, **({"message": message} if message else {}),
             **({"panel": panel, "version": version} if panel is not None else {})}
    rev = PlanRevision(plan_id=plan.id, number=number, kind="failure", status="queued", stage="queued",
                       progress=0.0, cause=cause, failed=[list(x) for x in sorted(failed)], repair=bool(repair),
                       attempts=0)
    try:
        with s.begin_nested():
            s.add(rev)
    except IntegrityError:              # another report took this number meanwhile (SQLite has no row lock)
        raise RevisionConflict(f"another failure report of plan {plan.id} was recorded at the same time; "
                               "send this one again") from None
    s.add(PlanEvent(plan_id=plan.id, status=plan.status, stage="revision", progress=plan.progress,
                    message=f"revision {number} queued: {', '.join(p['arc'] for p in physical)} failed "
                            f"({source}{' ' + panel if panel else ''})"))
    s.flush()
    notify.changed(s, "plan", plan.id)
    return rev, True


def failure_matcher(failed: list[dict]):
    """A test of a cross-connect against failed items ({ingress, egress}, or one side only: any cross-connect
    through that port), in constant time per cross-connect."""
    pairs = {(f["ingress"], f["egress"]) for f in failed if f.get("ingress") is not None and f.get("egress") is not None}
    ing = {f["ingress"] for f in failed if f.get("egress") is None}
    eg = {f["egress"] for f in failed if f.get("ingress") is None}
    return lambda c: (c["ingress"], c["egress"]) in pairs or c["ingress"] in ing or c["egress"] in eg


def panel_failures(s, panel_id: str, version: int, failed: list[dict], message: str | None) -> list[PlanRevision]:
    """A panel agent reported cross-connects of `version` down (`failed`: {ingress, egress} entries, either
    may be absent for a single port). Every plan whose current cross-connect is among them gets a revision
    (the caller records the faulty ports: `record_faults`). Returns the revisions created."""
    cfg = s.get(PanelConfig, (panel_id, version))
    hit: dict[str, list[tuple[int, int, int]]] = {}
    failing = failure_matcher(failed)
    for c in (cfg.connections if cfg is not None else []):
        if c.get("plan_id") is None or c.get("loopback"):
            continue
        if failing(c):
            hit.setdefault(c["plan_id"], []).append((c["tail"], c["head"], c["lane"], c["ingress"], c["egress"]))
    out = []
    for plan_id, arcs in sorted(hit.items()):
        plan, binding = s.get(Plan, plan_id), s.get(PlanBinding, plan_id)
        if plan is None or plan.status != "done" or binding is None or binding.released:
            continue
        # a connection the plan has moved away from since (a repair) is no longer its link
        where = _cabling(binding)
        current = [(t, h, lane) for t, h, lane, i, e in arcs if _on(where((t, h, lane)), panel_id, i, e)]
        if not current:
            continue
        try:
            rev, created = report_failures(s, plan, current, source="panel", message=message, panel=panel_id,
                                           version=version)
        except RevisionError as exc:            # the plan cannot run any more: recorded on the plan
            s.add(PlanEvent(plan_id=plan_id, status=plan.status, stage="revision", progress=plan.progress,
                            message=f"panel {panel_id} reported failed links: {exc.msg}"))
            notify.changed(s, "plan", plan_id)
            continue
        if created:
            out.append(rev)
    return out


def _on(where: dict, panel_id: str, ingress: int, egress: int) -> bool:
    return where.get("panel") == panel_id and where["ingress"] == ingress and where["egress"] == egress


def repairs_applied(s, fabric_id: str) -> list[PlanRevision]:
    """Pending repairs whose plans are fabric_ready again (every panel applied its re-patched version):
    applied, and - when the repair belongs to the plan's latest revision - a `restored` revision on the full
    topology. Returns the revisions created."""
    pending = list(s.scalars(select(Repair).join(PlanBinding, PlanBinding.plan_id == Repair.plan_id)
                             .where(Repair.status == "pending", PlanBinding.fabric_id == fabric_id,
                                    PlanBinding.fabric_ready.is_(True), PlanBinding.released.is_(False))))
    out = []
    for rep in pending:
        rep.status, rep.applied_at = "applied", utcnow()
        plan = s.get(Plan, rep.plan_id)
        last = latest(s, plan.id)
        if last is None or last.number != rep.revision_number:
            continue                            # a newer failure came meanwhile: its own repair restores
        number = last.number + 1
        rev = PlanRevision(plan_id=plan.id, number=number, kind="restored", status="done", stage="done",
                           progress=1.0, failed=[], repair=False, attempts=0, dispatched_at=utcnow(),
                           cause={"source": "repair", "revision": rep.revision_number, "repair_id": rep.id,
                                  "moves": len(rep.moves)},
                           result=_restored_result(s, plan))
        s.add(rev)
        rep.restored_number = number
        s.add(PlanEvent(plan_id=plan.id, status=plan.status, stage="revision", progress=plan.progress,
                        message=f"revision {number}: repair of revision {rep.revision_number} applied on every "
                                "panel; back on the full topology"))
        notify.changed(s, "plan", plan.id)
        out.append(rev)
    s.flush()
    return out


# ---------------------------------------------------------------------------------------------------
# worker side: the revision's stages
# ---------------------------------------------------------------------------------------------------
def _cpu() -> float:
    """CPU seconds of this process and its reaped children (a BFB pool's workers)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _claim(s, revision_id: str) -> PlanRevision:
    from .planner import claim

    claim(s, revision_id, "revision")
    return s.get(PlanRevision, revision_id)


def _advance(revision_id: str, stage: str, progress: float) -> None:
    with session_scope(_url()) as s:
        rev = _claim(s, revision_id)
        rev.status, rev.stage, rev.progress, rev.updated_at = "running", stage, progress, utcnow()
        notify.changed(s, "plan", rev.plan_id)


def stage_repair(revision_id: str) -> dict:
    """Re-patch the plan's arcs that sit on faulty ports onto spare ports (when requested and bound). The
    state counts the worker's CPU seconds stage by stage (`cpu_s`: the stages may run in different processes)."""
    c0 = _cpu()
    state = {"repair": _repair(revision_id)}
    return {**state, "cpu_s": _cpu() - c0}


def _repair(revision_id: str) -> dict:
    from services.fabric.repair import RepairError, repatch

    from .store import fabrics

    _advance(revision_id, "repair", 0.05)
    with session_scope(_url()) as s:
        rev = _claim(s, revision_id)
        if not rev.repair:
            return {"status": "not_requested"}
        b = s.get(PlanBinding, rev.plan_id)
        if b is None or b.released:
            return {"status": "unavailable", "reason": "the plan is not bound to a fabric" if b is None
                    else "the plan released its hosts"}
        fabrics._lock(s, b.fabric_id)
        state = fabrics.load_state(s, b.fabric_id)
        faults = [(f.panel_id, f.side, f.port) for f in s.scalars(
            select(PortFault).join(PanelRow, PanelRow.id == PortFault.panel_id).where(PanelRow.fabric_id == b.fabric_id))]
        side = b.assignment.get("side", 0)
        try:
            r = repatch(state.fabric.side(side), state.assignment(rev.plan_id), faults)
        except RepairError as exc:
            return {"status": "impossible", "reason": str(exc)}
        if not r.moves:
            return {"status": "none_needed"}
        versions = fabrics.replace_assignment(s, rev.plan_id, r.assignment,
                                              f"revision {rev.number}: {len(r.moves)} failed link(s) re-patched")
        estimate = fabrics.ready_estimate_s(s, b)
        rep = Repair(plan_id=rev.plan_id, revision_number=rev.number, status="pending",
                     panels={p: versions[p] for p in r.panels if p in versions}, moves=r.moves,
                     ready_estimate_s=estimate)
        s.add(rep)
        s.flush()
        return {"status": "pending", "id": rep.id, "panels": rep.panels, "moves": r.moves,
                "ready_estimate_s": estimate}


def mean_size(req: dict) -> float:
    """The workload's weighted mean message size: on uniform links a schedule's workload time is
    W (steps alpha + tau Mbar / B), so the faster schedule at Mbar is the faster for the whole workload."""
    from .planner import workload_items

    items = workload_items(req)
    total = sum(i.weight for i in items)
    if total > 0:
        return sum(i.size_bytes * i.weight for i in items) / total
    return sum(i.size_bytes for i in items) / len(items)


def stage_schedules(state: dict, revision_id: str) -> dict:
    """The degraded topology's verified AG/RS/AR schedules, stored under the revision's artifact prefix."""
    from services.synthesis.bfb.degraded import degraded_schedules
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.topology.catalog import build

    from .planner import link_loads_blob, topology_facts, topology_graphml, topology_json

    if state.get("stop"):
        return state
    c0 = _cpu()
    _advance(revision_id, "schedule", 0.15)
    with session_scope(_url()) as s:
        rev = _claim(s, revision_id)
        plan = s.get(Plan, rev.plan_id)
        req, expr, failed, number = dict(plan.request), plan.result["topology"]["expr"], list(rev.failed), rev.number
    t0 = time.perf_counter()
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    # one process: a job process may not fork a pool of its own (embedded: a daemonic process; Celery: a
    # pool child), and a vertex-transitive plan's revision solves only the receivers the failure changed
    out = degraded_schedules(build(expr), [tuple(f) for f in failed], link, mean_size(req),
                             bfb_options={"workers": 1})
    g = out.topology
    _advance(revision_id, "verify", 0.8)
    summaries, blobs = {}, {}
    for c, cmp in out.comparisons.items():
        chosen = cmp.chosen
        if not chosen.verified:             # choose() serves only a schedule that passed; never store another
            raise RuntimeError(f"the {c.value} schedule of {g.expr} is not verified")
        blobs[c.value] = (chosen.schedule.to_bytes(), link_loads_blob(chosen.schedule, g, chosen.tau))
        summaries[c.value] = {"steps": chosen.steps, "tau": float(chosen.tau), "tau_exact": str(chosen.tau),
                              "verified": True, "transfers": chosen.schedule.transfers, "scheduler": chosen.scheduler,
                              "candidates": [x.as_dict() for x in cmp.candidates]}
    seconds = time.perf_counter() - t0
    prefix = f"rev{number}:"
    with session_scope(_url()) as s:
        _claim(s, revision_id)
        for c, (sched, loads) in blobs.items():
            digest = repo.put_blob(s, sched, "schedule", "application/x-npz", compress=False)
            repo.attach(s, rev.plan_id, f"{prefix}schedule:{c}", digest, summaries[c])
            summaries[c]["digest"] = digest
            repo.attach(s, rev.plan_id, f"{prefix}loads:{c}",
                        repo.put_blob(s, loads, "link-loads", "application/x-npz", compress=False))
        meta = {"nodes": g.nodes, "degree": g.degree}
        topo_digest = repo.put_blob(s, json.dumps(topology_json(g)).encode(), "topology", "application/json")
        repo.attach(s, rev.plan_id, f"{prefix}topology", topo_digest, meta)
        repo.attach(s, rev.plan_id, f"{prefix}topology:graphml",
                    repo.put_blob(s, topology_graphml(g), "topology", "application/graphml+xml"), meta)
    topology = {"expr": g.expr, "nodes": g.nodes, "degree": g.degree, "regular": g.regular,
                "removed": [[int(x) for x in f] for f in failed], **topology_facts(g)}
    return {**state, "schedules": summaries, "topology": topology, "topology_digest": topo_digest,
            "artifact_prefix": prefix, "seconds": seconds, "cpu_s": state.get("cpu_s", 0.0) + _cpu() - c0}


def _predicted(req: dict, schedules: dict) -> dict:
    from services.synthesis.schedule.cost import LinkModel

    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    return {c: {str(m): link.time(sm["steps"], Fraction(sm["tau_exact"]), m) * 1e6
                for m in message_sizes(req)} for c, sm in schedules.items()}


def _workload_us(req: dict, predicted: dict) -> float:
    """The workload's collectives at the predicted times (weights as in the plan's selection)."""
    from .planner import workload_items

    return sum(i.weight * predicted[i.collective.value][str(int(i.size_bytes))] for i in workload_items(req))


def _ring_fallback(req: dict) -> dict:
    """The naive fallback after a failure: a ring over surviving links, one link (B/d) per hop:
    N - 1 steps and tau = d (N-1)/N per allgather or reduce-scatter, twice that for allreduce (optimistic for
    the ring: it assumes the degraded topology still has a Hamiltonian cycle)."""
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.schedule.ir import ALLGATHER_FAMILY

    n, d = int(req["nodes"]), int(req["degree"])
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    return {c.value: {str(m): link.collective_time(c, n - 1, Fraction(d * (n - 1), n), m) * 1e6
                      for m in message_sizes(req)}
            for c in ALLGATHER_FAMILY}


def _failure_cost(req: dict, before: dict, after: dict, before_number: int) -> dict:
    """Before/after per collective and size, the workload's, and the ring fallback's."""
    ring = _ring_fallback(req)
    wb, wa, wr = _workload_us(req, before), _workload_us(req, after), _workload_us(req, ring)
    return {"compared_with_revision": before_number,
            "workload_us": {"before": wb, "after": wa, "slowdown": wa / wb if wb else None,
                            "ring_fallback": wr},
            "collectives": {c: {m: {"before_us": before[c][m], "after_us": after[c][m],
                                    "slowdown": after[c][m] / before[c][m] if before[c][m] else None,
                                    "ring_fallback_us": ring[c][m]}
                                for m in after[c]} for c in after},
            "note": "workload_us counts the workload's collectives (an all-to-all share is not re-planned); the "
                    "ring fallback is one ring over surviving links, one link per hop"}


def stage_compile(state: dict, revision_id: str) -> dict:
    """The revision's XML: the plan's compile stage (services.compiling) on the revision's schedules, for the
    runtimes the plan lists; refusals are reported, not failures."""
    if state.get("stop"):
        return state
    from . import compiling

    with session_scope(_url()) as s:
        plan_id = _claim(s, revision_id).plan_id

    def advance(_plan_id: str, stage: str, progress: float, message: str | None = None) -> None:
        _advance(revision_id, stage, 0.85 + 0.1 * (progress - 0.96) / 0.04)

    c0, t0 = _cpu(), time.perf_counter()
    out = compiling.stage_compile(state, plan_id, advance, prefix=state["artifact_prefix"])
    return {**out, "compile_s": time.perf_counter() - t0, "cpu_s": out.get("cpu_s", 0.0) + _cpu() - c0}


def stage_finish(state: dict, revision_id: str) -> dict:
    """Predicted times and the failure's cost; the revision done (atomically with its result)."""
    if state.get("stop"):
        return state
    c0 = _cpu()
    with session_scope(_url()) as s:
        rev = _claim(s, revision_id)
        plan = s.get(Plan, rev.plan_id)
        req = dict(plan.request)
        predicted = _predicted(req, state["schedules"])
        original = plan.result["predicted_time_us"]
        result = {"topology": state["topology"], "schedules": state["schedules"], "predicted_time_us": predicted,
                  "workload_time_us": _workload_us(req, predicted),
                  "failure_cost": _failure_cost(req, original, predicted, 0),
                  "repair": state.get("repair"), "artifact_prefix": state["artifact_prefix"],
                  "compiled": state.get("compiled"),
                  "seconds": state.get("seconds"), "compile_s": state.get("compile_s"),
                  "cpu_s": state.get("cpu_s", 0.0) + _cpu() - c0}
        rev.status, rev.stage, rev.progress, rev.result, rev.reason = "done", "done", 1.0, result, None
        rev.updated_at = rev.heartbeat_at = utcnow()
        slow = result["failure_cost"]["workload_us"]["slowdown"]
        s.add(PlanEvent(plan_id=plan.id, status=plan.status, stage="revision", progress=plan.progress,
                        message=f"revision {rev.number} done: {state['topology']['expr']}"
                                + (f", workload {slow:.3f}x the original" if slow else "")))
        notify.changed(s, "plan", plan.id)
    return {"done": True}


def _restored_result(s, plan: Plan) -> dict:
    """A restored revision: revision 0's topology, schedules and artifacts, its cost against the current
    revision it ends (the latest done one; on an OCS the repair can be applied before the degraded revision it
    came with is built, and then that is an earlier one)."""
    r0 = plan.result
    last = current(s, plan.id)
    before = last.result["predicted_time_us"] if last is not None and last.result else r0["predicted_time_us"]
    req = dict(plan.request)
    return {"topology": r0["topology"], "schedules": r0["schedules"], "predicted_time_us": r0["predicted_time_us"],
            "workload_time_us": _workload_us(req, r0["predicted_time_us"]),
            "failure_cost": _failure_cost(req, before, r0["predicted_time_us"], last.number if last else 0),
            "artifact_prefix": "", "seconds": 0.0}


def fail(revision_id: str, reason: str, attempt: int | None = None, url: str | None = None) -> bool:
    """Fail the revision with the reason (only while it runs `attempt`)."""
    with session_scope(url or _url()) as s:
        if not jobs.claim(s, "revision", revision_id, attempt):
            return False
        rev = s.get(PlanRevision, revision_id)
        rev.status, rev.reason, rev.updated_at = "failed", reason, utcnow()
        plan = s.get(Plan, rev.plan_id)
        s.add(PlanEvent(plan_id=plan.id, status=plan.status, stage="revision", progress=plan.progress,
                        message=f"revision {rev.number} failed: {reason}"))
        notify.changed(s, "plan", plan.id)
        return True


# ---------------------------------------------------------------------------------------------------
# views
# ---------------------------------------------------------------------------------------------------
def current(s, plan_id: str) -> PlanRevision | None:
    """The highest-numbered done revision (None: revision 0, the plan itself)."""
    return s.scalar(select(PlanRevision).where(PlanRevision.plan_id == plan_id, PlanRevision.status == "done")
                    .order_by(PlanRevision.number.desc()).limit(1))


def current_number(revisions) -> int:
    return max((r.number for r in revisions if r.status == "done"), default=0)


def plan_revision_ref(plan: Plan, base: str) -> dict | None:
    """The plan's `revision` block: the current revision and how many there are (done plans only)."""
    if plan.status != "done":
        return None
    revs = list(plan.revisions)
    n = current_number(revs)
    cur = next((r for r in revs if r.number == n), None)
    url = f"{base}/v1/plans/{plan.id}/revisions"
    return {"current": n, "kind": cur.kind if cur else "original",
            "expr": (cur.result or {}).get("topology", {}).get("expr") if cur else (plan.result or {}).get(
                "topology", {}).get("expr"),
            "failed": [f"{t}>{h}" for t, h, _ in (cur.failed if cur else [])],
            "revisions": len(revs) + 1, "in_progress": sum(r.status in ("queued", "running") for r in revs),
            "url": f"{url}/{n}", "list_url": url}


def _repair_view(s, plan_id: str, number: int, stored: dict | None) -> dict | None:
    rep = s.scalar(select(Repair).where(Repair.plan_id == plan_id, Repair.revision_number == number))
    if rep is None:
        return stored
    return {"status": rep.status, "panels": rep.panels, "moves": rep.moves, "ready_estimate_s": rep.ready_estimate_s,
            "restored_revision": rep.restored_number,
            "applied_at": rep.applied_at.isoformat() if rep.applied_at else None}


def artifact_link(s, plan: Plan, number: int, name: str):
    """(the revision, the PlanArtifact of `name` in revision `number`) - the revision is None for 0."""
    if number == 0:
        return None, repo.plan_artifact(s, plan.id, name)
    rev = find(s, plan.id, number)
    if rev is None or rev.status != "done":
        return rev, None
    return rev, repo.plan_artifact(s, plan.id, rev.result["artifact_prefix"] + name)


def find(s, plan_id: str, number: int) -> PlanRevision | None:
    return s.scalar(select(PlanRevision).where(PlanRevision.plan_id == plan_id, PlanRevision.number == number))


def revision_summary(plan: Plan, rev: PlanRevision | None, base: str, cur: int) -> dict:
    """One entry of the revision list (revision 0 when `rev` is None)."""
    number = 0 if rev is None else rev.number
    result = (plan.result if rev is None else rev.result) or {}
    slow = ((result.get("failure_cost") or {}).get("workload_us") or {}).get("slowdown")
    return {"number": number, "kind": "original" if rev is None else rev.kind,
            "status": plan.status if rev is None else rev.status, "current": number == cur,
            "created_at": plan.created_at if rev is None else rev.created_at,
            "expr": (result.get("topology") or {}).get("expr"),
            "failed": [] if rev is None else [f"{t}>{h}" for t, h, _ in rev.failed],
            "workload_slowdown": slow, "url": f"{base}/v1/plans/{plan.id}/revisions/{number}"}


def revision_view(s, plan: Plan, rev: PlanRevision | None, base: str, cur: int) -> dict:
    """A revision in full: status, cause, failed links, repair, topology, schedules (with URLs), predicted
    times and the cost of the failure."""
    number = 0 if rev is None else rev.number
    result = (plan.result if rev is None else rev.result) or {}
    url = f"{base}/v1/plans/{plan.id}/revisions/{number}"
    schedules = None
    links = {"self": url, "plan": f"{base}/v1/plans/{plan.id}"}
    if result.get("schedules"):
        schedules = {}
        for c, sm in result["schedules"].items():
            schedules[c] = {**{k: v for k, v in sm.items() if k != "digest"}, "url": f"{url}/schedules/{c}"}
            links[f"schedule:{c}"] = f"{url}/schedules/{c}"
        links["topology"] = f"{url}/topology"
    compiled = None
    if result.get("compiled"):
        compiled = {}
        for runtime, per in result["compiled"].items():
            query = "format=oneccl" if runtime == "oneccl" else f"format=msccl&runtime={runtime}"
            compiled[runtime] = {c: {**summary, "url": f"{url}/schedules/{c}?{query}"} for c, summary in per.items()}
            links.update({f"xml:{runtime}:{c}": f"{url}/schedules/{c}?{query}" for c in per})
    out = revision_summary(plan, rev, base, cur)
    out.update({
        "plan_id": plan.id,
        "progress": {"fraction": plan.progress if rev is None else rev.progress,
                     "stage": plan.stage if rev is None else rev.stage},
        "reason": plan.reason if rev is None else rev.reason,
        "updated_at": plan.updated_at if rev is None else rev.updated_at,
        "cause": None if rev is None else rev.cause,
        "failed_links": [] if rev is None else [{"arc": f"{t}>{h}", "lane": lane} for t, h, lane in rev.failed],
        "repair_requested": False if rev is None else rev.repair,
        "repair": None if rev is None else _repair_view(s, plan.id, rev.number, result.get("repair")),
        "topology": result.get("topology"), "schedules": schedules, "compiled": compiled,
        "predicted_time_us": result.get("predicted_time_us"), "workload_time_us": result.get("workload_time_us"),
        "failure_cost": result.get("failure_cost"),
        "build": None if rev is None or rev.kind != "failure" or not result else
        {"schedules_s": result.get("seconds"), "compile_s": result.get("compile_s"), "cpu_s": result.get("cpu_s")},
        "links": links})
    return out

