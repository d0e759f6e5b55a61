"""Plan revisions on the request side (DESIGN 4.9): failure reports that queue a revision, faulty
panel ports, the restored revision after a repair, and finding revisions. The revision job itself (repair ->
schedules -> compile -> finish) is services.jobs.kinds.revision; how the API shows revisions is
services.api.revision_views.

A plan's topology, schedules and artifacts belong to a revision. Revision 0 is the plan as it was made; every
failure report that names links not yet failed makes the next revision (`kind` failure), with every link
failed so far removed:

    report (PUT /v1/panels/{id}/state "degraded", or POST /v1/plans/{id}/failures)
      -> a queued revision row (the request only records it, 202)
      -> worker: repair -> schedules -> compile -> finish     (workers.tasks.revision_workflow)

When every panel of the plan has applied a pending repair, the plan gets a `restored` revision on the full
topology; its schedules and artifacts are revision 0's (nothing to build, so it is recorded in the panel
report's transaction). The current revision - what the scheduler should run - is the highest-numbered done
revision (0 when there is none); old revisions stay and are listed.
"""
from __future__ import annotations

import json

import numpy as np
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from services.store import job_metrics, notify, repo
from services.store.db import write_lock
from services.store.models import PanelConfig, Plan, PlanBinding, PlanEvent, PlanRevision, PortFault, Repair, utcnow
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.stages.revision_cost import failure_cost, workload_us

__all__ = ["RevisionError", "RevisionConflict", "MAX_FAILED_LINKS", "report_failures", "record_faults",
           "clear_faults", "failure_matcher", "panel_failures", "repairs_applied", "latest", "current",
           "current_number", "find", "artifact_link"]

MAX_FAILED_LINKS = 1024


class RevisionError(ValueError):
    """A failure report that names something wrong (`loc`: where, the message: why): HTTP 422."""

    def __init__(self, loc: tuple, msg: str):
        self.loc, self.msg = tuple(loc), msg
        super().__init__(msg)


class RevisionConflict(Exception):
    """A failure report the plan cannot take now (not done yet): HTTP 409."""


def _arc_text(t: int, h: int) -> str:
    return f"{t}>{h}"


# ---------------------------------------------------------------------------------------------------
# recording failures (cheap, in the caller's transaction)
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
    nodes = PlanSpec.load(plan.request).nodes
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
    write_lock(s)                       # SQLite: a SAVEPOINT opening the transaction would commit on release
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
    job_metrics.observe(s, "fabricplan_revisions", ("failure", source), 1)
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
        job_metrics.observe(s, "fabricplan_revisions", ("restored", "repair"), 1)
        s.add(PlanEvent(plan_id=plan.id, status=plan.status, stage="revision", progress=plan.progress,
                        message=f"revision {number}: repair of revision {rep.revision_number} applied on every "
                                "panel; back on the full topology"))
        notify.changed(s, "plan", plan.id)
        out.append(rev)
    s.flush()
    return out


def _restored_result(s, plan: Plan) -> dict:
    """A restored revision: revision 0's topology, schedules (the all-to-all's too) and artifacts, its cost
    against the current revision it ends (the latest done one; on an OCS the repair can be applied before the
    degraded revision it came with is built, and then that is an earlier one)."""
    r0 = plan.result
    last = current(s, plan.id)
    shown = last.result if last is not None and last.result else r0
    spec = PlanSpec.load(plan.request)
    return {"topology": r0["topology"], "schedules": r0["schedules"], "predicted_time_us": r0["predicted_time_us"],
            "barrier_time_us": r0.get("barrier_time_us"),
            "workload_time_us": workload_us(spec, r0["predicted_time_us"]), "alltoall": r0.get("alltoall"),
            "compiled": r0.get("compiled"),
            "failure_cost": failure_cost(spec, shown["predicted_time_us"], r0["predicted_time_us"],
                                         last.number if last else 0, shown.get("alltoall"), r0.get("alltoall")),
            "artifact_prefix": "", "seconds": 0.0}


# ---------------------------------------------------------------------------------------------------
# finding revisions
# ---------------------------------------------------------------------------------------------------
def current(s, plan_id: str) -> PlanRevision | None:
    """The highest-numbered done revision (None: revision 0, the plan itself)."""
    return s.scalar(select(PlanRevision).where(PlanRevision.plan_id == plan_id, PlanRevision.status == "done")
                    .order_by(PlanRevision.number.desc()).limit(1))


def current_number(revisions) -> int:
    return max((r.number for r in revisions if r.status == "done"), default=0)


def artifact_link(s, plan: Plan, number: int, name: str):
    """(the revision, the PlanArtifact of `name` in revision `number`) - the revision is None for 0."""
    if number == 0:
        return None, repo.plan_artifact(s, plan.id, name)
    rev = find(s, plan.id, number)
    if rev is None or rev.status == "failed":
        return rev, None
    # a running revision's verified schedules and topology are served as soon as its schedules stage stored them
    # (services.jobs.kinds.revision: the prefix is rev{n}:), before its XML
    prefix = rev.result["artifact_prefix"] if rev.status == "done" else f"rev{rev.number}:"
    return rev, repo.plan_artifact(s, plan.id, prefix + name)


def find(s, plan_id: str, number: int) -> PlanRevision | None:
    return s.scalar(select(PlanRevision).where(PlanRevision.plan_id == plan_id, PlanRevision.number == number))
