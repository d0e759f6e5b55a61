"""How the API shows plan revisions (DESIGN 4.9): the plan's `revision` block, one entry of the revision list,
and a revision in full with its URLs. Read-only views over the store's rows (services.jobs.requests.failure_reports
records them; services.jobs.kinds.revision builds them).
"""
from __future__ import annotations

from sqlalchemy import select

from services.jobs.requests.failure_reports import current_number
from services.store import repo
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.stages.compile_units import plan_units
from services.store.models import CompileJob, Plan, PlanArtifact, PlanRevision, Repair

from .plan_access import compile_failed, compiled_view
from .progress import progress_block

__all__ = ["plan_revision_ref", "revision_summary", "revision_view"]


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


def revision_summary(plan: Plan, rev: PlanRevision | None, base: str, cur: int) -> dict:
    """One entry of the revision list (revision 0 when `rev` is None)."""
    number = 0 if rev is None else rev.number
    result = (plan.result if rev is None else rev.result) or {}
    restored = rev is not None and rev.kind == "restored"
    slow = None if restored else ((result.get("failure_cost") or {}).get("workload_us") or {}).get("slowdown")
    return {"number": number, "kind": "original" if rev is None else rev.kind,
            "restores": (rev.cause or {}).get("revision") if restored else None,
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
            if sm.get("by_size"):
                schedules[c]["by_size"] = [{**row, "url": f"{url}/schedules/{c}?range={i}"}
                                           for i, row in enumerate(sm["by_size"])]
            links[f"schedule:{c}"] = f"{url}/schedules/{c}"
        links["topology"] = f"{url}/topology"
    restored = rev is not None and rev.kind == "restored"
    stored_compiled = result.get("compiled")
    if restored and not stored_compiled:          # revision 0's files (its artifacts are revision 0's too)
        stored_compiled = (plan.result or {}).get("compiled")
    compiled = None
    if stored_compiled:
        compiled = compiled_view(stored_compiled, lambda c: f"{url}/schedules/{c}", links)
    pending = None
    if rev is not None and rev.status in ("queued", "running"):
        schedules, compiled, pending = _in_progress(s, plan, rev, url, links)
    out = revision_summary(plan, rev, base, cur)
    out.update({
        "plan_id": plan.id,
        "progress": ({"fraction": plan.progress, "stage": plan.stage} if rev is None else
                     progress_block(s, plan.id, rev.status, rev.progress, rev.stage, revision=rev.number)),
        "reason": plan.reason if rev is None else rev.reason,
        "updated_at": plan.updated_at if rev is None else rev.updated_at,
        "cause": None if rev is None else rev.cause,
        "failed_links": [] if rev is None else [{"arc": f"{t}>{h}", "lane": lane} for t, h, lane in rev.failed],
        "repair_requested": False if rev is None else rev.repair,
        "repair": None if rev is None else _repair_view(s, plan.id, rev.number, result.get("repair")),
        "topology": result.get("topology"), "schedules": schedules, "compiled": compiled,
        "compile_failed": compile_failed(stored_compiled) if pending is None else None,
        "predicted_time_us": result.get("predicted_time_us"), "barrier_time_us": result.get("barrier_time_us"),
        "workload_time_us": result.get("workload_time_us"),
        "alltoall": _alltoall_view(result.get("alltoall"), links),
        "failure_cost": None if restored else result.get("failure_cost"),
        "restore_gain": result.get("failure_cost") if restored else None,
        "build": None if rev is None or rev.kind != "failure" or not result else
        {"schedules_s": result.get("seconds"), "compile_s": result.get("compile_s"), "cpu_s": result.get("cpu_s")},
        "compile_pending": pending,
        "links": links})
    return out


def _alltoall_view(a2a: dict | None, links: dict) -> dict | None:
    """The revision's (or the plan's) all-to-all result with its schedule's URL when it has one."""
    if not a2a:
        return None
    return {**a2a, "url": links.get("schedule:alltoall") if a2a.get("status") == "built" else None}


_COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall")


def _in_progress(s, plan: Plan, rev: PlanRevision, url: str, links: dict):
    """A running revision's (schedules, compiled, compile_pending): the verified schedules its schedules stage
    stored, with their sets' ranges (served at once, services.jobs.requests.failure_reports.artifact_link), its compile
    jobs so far (the stage's own: the file's options), and the files (`runtime:collective`, `runtime:c@i`)
    not compiled yet."""
    prefix = f"rev{rev.number}:"
    schedules = {}
    for c in _COLLECTIVES:
        link = repo.plan_artifact(s, plan.id, f"{prefix}schedule:{c}")
        if link is not None:
            schedules[c] = {**{k: v for k, v in (link.meta or {}).items() if k != "digest"},
                            "url": f"{url}/schedules/{c}"}
            links[f"schedule:{c}"] = f"{url}/schedules/{c}"
    if not schedules:
        return None, None, None
    links["topology"] = f"{url}/topology"
    runtimes = [r.value for r in PlanSpec.load(plan.request).runtime_list]
    # by file and options: an on-demand compile of the same file with other options is another job
    jobs = {(j.collective.removeprefix(prefix), j.options): j for j in s.scalars(
        select(CompileJob).where(CompileJob.plan_id == plan.id, CompileJob.collective.like(f"{prefix}%")))}
    ranges = {link.name.removeprefix(f"{prefix}schedule:"): link for link in s.scalars(
        select(PlanArtifact).where(PlanArtifact.plan_id == plan.id,
                                   PlanArtifact.name.like(f"{prefix}schedule:%@%")))}
    by_size = {c: [ranges[f"{c}@{i}"].meta or {} for i in range(len(ranges)) if f"{c}@{i}" in ranges]
               for c in _COLLECTIVES}
    for c, rows in by_size.items():         # the sets' ranges are served as soon as stored, as when done
        if rows and c in schedules:
            schedules[c]["by_size"] = [{**row, "url": f"{url}/schedules/{c}?range={i}"} for i, row in enumerate(rows)]
    digests = {name: link.digest for name, link in ranges.items()}
    digests.update({c: repo.plan_artifact(s, plan.id, f"{prefix}schedule:{c}").digest for c in schedules})
    units, _ = plan_units(runtimes, [c for c in _COLLECTIVES if c in schedules], by_size, digests, {})
    compiled, pending = {}, []
    for u in units:
        if u.alias:
            continue
        per = compiled.setdefault(u.runtime, {})
        job = jobs.get((u.name, u.options.key()))
        state = ({"status": job.status, "options": job.options} if job is not None and job.status in ("done", "failed")
                 else {"status": job.status if job is not None else "queued"})
        if state["status"] not in ("done", "failed"):
            pending.append(u.label)
        if u.index is None:
            per[u.collective] = {**state, **per.get(u.collective, {})}
        else:
            per.setdefault(u.collective, {}).setdefault("by_size", []).append({"range": u.index, **state})
    return schedules, compiled, pending
