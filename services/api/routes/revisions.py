"""/v1/plans/{id}/failures, /revisions, /activate: a done plan on a live fabric (DESIGN 4.9).

A failure report only records a queued revision (202 with its URL); a worker builds it (services.jobs.kinds.revision).
Revisions are listed (revision 0 is the plan as made) and each one's topology and schedules are served like
the plan's own. `activate` flips a look-ahead plan's hosts to its plane (TopoOpt App. C).
"""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from sqlalchemy.orm import Session

from services.jobs.requests import failure_reports
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.requests.workloads import has_alltoall
from services.store import fabrics
from services.synthesis.schedule.ir import Collective

from .. import budget
from ..bodies import OffLoopRoute
from ..auth import READ, WRITE, Principal
from ..deps import Limit, Offset, get_session
from ..errors import unprocessable
from ..downloads import (NOT_MODIFIED, SCHEDULE_DOWNLOAD, TOPOLOGY_DOWNLOAD, XML_FORMATS, RevisionCollectivePath,
                         ScheduleFormat, TopologyFormat, node_link_render)
from ..responses import AUTH, BODY, COMMON, COMPILE_REFUSED, TOO_MANY
from ..schemas import (ActivationOut, CompileAccepted, ErrorOut, FailureReport, RevisionAccepted, RevisionOut, RevisionSummary)
from ..blobs import NPZ, blob_response
from ..plan_access import (NOT_FOUND, compile_query, compiled_xml, plan_or_404, range_xml, schedule_json_bytes,
                           utc)
from ..revision_views import revision_summary, revision_view

router = APIRouter(route_class=OffLoopRoute, prefix="/v1/plans", tags=["revisions"], responses={**COMMON, **AUTH})
RevisionNumber = Annotated[str, Path(pattern=r"^(\d{1,9}|current)$", description="a revision number, or `current`")]


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


@router.post("/{plan_id}/failures", status_code=202, response_model=RevisionAccepted,
             responses={**NOT_FOUND, **BODY, **TOO_MANY,
                        202: {"model": RevisionAccepted, "description": "a revision is queued"},
                        200: {"model": RevisionAccepted, "description": "every link named had failed already: the "
                                                                        "latest revision"},
                        409: {"model": ErrorOut, "description": "the plan is not done"}})
def report_failures(plan_id: str, body: FailureReport, request: Request, response: Response,
                    s: Session = Depends(get_session), principal: Principal = Depends(WRITE)):
    """The scheduler reports failed links of a done plan. The plan gets a new revision, built by a worker:
    the failed arcs removed, schedules rebuilt and model-checked, predicted times and the cost of the failure;
    with `repair` and spare ports on a panel or OCS, the links are re-patched and the plan returns to its full
    topology once the panels apply the new configs. 422 for an arc the topology lacks or a failure that
    disconnects it. Reports of one fabric are recorded one at a time (its lock, as a panel's report)."""
    fabrics.lock_for_plan(s, plan_id)
    plan = plan_or_404(s, plan_id)
    owner = budget.room(s, principal, request.app.state.settings)        # 429 at the key's bound
    try:
        rev, created = failure_reports.report_failures(s, plan, [x.model_dump() for x in body.links],
                                                       source="scheduler", repair=body.repair, message=body.message)
    except failure_reports.RevisionConflict as exc:
        s.rollback()                                   # nothing of the report is stored
        raise HTTPException(409, str(exc)) from None
    except failure_reports.RevisionError as exc:
        s.rollback()
        raise unprocessable(exc.loc, exc.msg) from None
    if created and rev is not None:
        rev.owner = owner
    s.commit()
    request.app.state.plan_cache.drop(plan_id)
    if created:
        request.app.state.dispatcher.wake()
    else:
        response.status_code = 200
    number = rev.number if rev is not None else 0
    url = f"{_base(request)}/v1/plans/{plan_id}/revisions/{number}"
    response.headers["Location"] = url
    return RevisionAccepted(plan_id=plan_id, number=number, status=rev.status if rev else plan.status, url=url)


@router.get("/{plan_id}/revisions", response_model=list[RevisionSummary], dependencies=[Depends(READ)],
            responses=NOT_FOUND)
def list_revisions(plan_id: str, request: Request, response: Response, limit: Limit = 100,
                   offset: Offset = 0, s: Session = Depends(get_session)):
    """Every revision of the plan, oldest first (revision 0 is the plan as made); X-Total-Count."""
    plan = plan_or_404(s, plan_id)
    revs = [None, *plan.revisions]
    cur = failure_reports.current_number(plan.revisions)
    response.headers["X-Total-Count"] = str(len(revs))
    return [_summary(revision_summary(plan, r, _base(request), cur)) for r in revs[offset:offset + limit]]


def _summary(d: dict) -> dict:
    return {**d, "created_at": utc(d["created_at"])}


def _revision(s: Session, plan, number: str):
    """(revision row or None for 0, its number, the current number): 404 for one that does not exist."""
    cur = failure_reports.current_number(plan.revisions)
    n = cur if number == "current" else int(number)
    if n == 0:
        return None, 0, cur
    rev = next((r for r in plan.revisions if r.number == n), None)
    if rev is None:
        raise HTTPException(404, f"plan {plan.id} has no revision {n} (it has 0..{len(plan.revisions)})")
    return rev, n, cur


@router.get("/{plan_id}/revisions/{number}", response_model=RevisionOut, dependencies=[Depends(READ)],
            responses=NOT_FOUND)
def get_revision(plan_id: str, number: RevisionNumber, request: Request, s: Session = Depends(get_session)):
    """One revision: status, what caused it, the failed links, the repair, its topology, verified schedules,
    predicted times and the cost of the failure (before/after, and a ring over the surviving links)."""
    plan = plan_or_404(s, plan_id)
    rev, _, cur = _revision(s, plan, number)
    out = revision_view(s, plan, rev, _base(request), cur)
    return {**out, "created_at": utc(out["created_at"]), "updated_at": utc(out["updated_at"])}


def _artifact(s: Session, plan, number: str, name: str):
    rev, n, _ = _revision(s, plan, number)
    if rev is None and plan.status != "done":
        raise HTTPException(409, f"plan {plan.id} is {plan.status}; its artifacts exist once it is done")
    rev, link = failure_reports.artifact_link(s, plan, n, name)
    if link is None:
        raise HTTPException(409, f"revision {n} of plan {plan.id} is {rev.status if rev else plan.status}; its "
                                 "artifacts exist once it is done")
    return link


def _alltoall_missing(s: Session, plan, number: str) -> None:
    """404 for a workload without an all-to-all; 409 with the reason for a done revision (or revision 0)
    whose all-to-all has no schedule (refused, or priced by its throughput bracket: approximate)."""
    if plan.status == "done" and not has_alltoall(PlanSpec.load(plan.request)):
        raise HTTPException(404, f"plan {plan.id} has no all-to-all: its workload has none (alltoall_bytes, or a "
                                 "training job's MoE layers)")
    rev, n, _ = _revision(s, plan, number)
    result = plan.result if rev is None else rev.result if rev.status == "done" else None
    a2a = (result or {}).get("alltoall") or {}
    if a2a and a2a.get("status") != "built":
        raise HTTPException(409, f"revision {n} of plan {plan.id} has no all-to-all schedule ({a2a['status']}): "
                                 f"{a2a.get('reason')}")
    if result is not None and not a2a and failure_reports.artifact_link(s, plan, n, "schedule:alltoall")[1] is None:
        raise HTTPException(409, f"revision {n} of plan {plan.id} has no all-to-all schedule: it was built before "
                                 "revisions re-planned the all-to-all")


@router.get("/{plan_id}/revisions/{number}/topology", dependencies=[Depends(READ)], responses={
    **NOT_FOUND, 409: {"model": ErrorOut}, **NOT_MODIFIED, 200: TOPOLOGY_DOWNLOAD})
def revision_topology(plan_id: str, number: RevisionNumber, request: Request,
                      format: TopologyFormat = Query("json"), s: Session = Depends(get_session)):
    """The revision's topology (the failed arcs removed) as JSON (arcs [tail, head, lane]) or GraphML."""
    plan = plan_or_404(s, plan_id)
    link = _artifact(s, plan, number, "topology:graphml" if format == "graphml" else "topology")
    if format == "node-link":
        return blob_response(request, s, link.digest, "application/json", f"{plan_id}-r{number}-node-link.json",
                             render=node_link_render, etag_suffix="-node-link")
    media = "application/graphml+xml" if format == "graphml" else "application/json"
    return blob_response(request, s, link.digest, media, f"{plan_id}-r{number}.{'graphml' if format == 'graphml' else 'json'}")


@router.get("/{plan_id}/revisions/{number}/schedules/{collective}", dependencies=[Depends(READ)], responses={
    **NOT_FOUND, 409: {"model": ErrorOut}, **NOT_MODIFIED, 200: SCHEDULE_DOWNLOAD,
    202: {"model": CompileAccepted, "description": "the XML is being compiled in a worker: poll the url"},
    **COMPILE_REFUSED, **TOO_MANY})
def revision_schedule(plan_id: str, number: RevisionNumber, collective: RevisionCollectivePath, request: Request,
                      format: ScheduleFormat = Query("json"),
                      range_: int | None = Query(None, alias="range", ge=0, le=1 << 20,
                                                 description="a size range of the schedule set (by_size[range])"),
                      options=Depends(compile_query), s: Session = Depends(get_session),
                      principal: Principal = Depends(READ)):
    """A verified schedule of the revision: `npz` is the IR blob, `json` the paper's tuples per step, `msccl`
    and `oneccl` the runtimes' XML (compiled by the revision's worker for the plan's runtimes, otherwise on
    demand in a worker: 202 and a URL to poll, as for the plan's schedules). `range=i` serves the schedule of
    size range i of the revision's schedule set (`schedules.<collective>.by_size[i]`): json, npz, or msccl with
    minBytes/maxBytes set to the range (as the plan's)."""
    try:
        coll = Collective.parse(collective)
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None
    plan = plan_or_404(s, plan_id)
    if coll is Collective.ALLTOALL:
        _alltoall_missing(s, plan, number)
    if range_ is not None:
        _artifact(s, plan, number, f"schedule:{coll.value}")          # 409 until the revision is done
        rev, n, _ = _revision(s, plan, number)
        if format in XML_FORMATS:
            if rev is not None and rev.status != "done":
                raise HTTPException(409, f"revision {n} of plan {plan_id} is {rev.status}: its XML is compiled by "
                                         "its worker (the revision's compile_pending); its schedules are served "
                                         "already")
            result = (plan.result if rev is None else rev.result) or {}
            by_size = ((result.get("schedules") or {}).get(coll.value) or {}).get("by_size")
            prefix = result.get("artifact_prefix", "") if rev is not None else ""
            return range_xml(s, request, plan_id, coll, format, options(format), range_, by_size, prefix,
                             principal=principal)
        _, link = failure_reports.artifact_link(s, plan, n, f"schedule:{coll.value}@{range_}")
        if link is None:
            raise HTTPException(404, f"revision {n} of plan {plan_id} has no size range {range_} of its "
                                     f"{coll.value} set")
        name = f"{plan_id}-r{n}-{coll.value}-range{range_}"
        if format == "npz":
            return blob_response(request, s, link.digest, "application/x-npz", f"{name}.npz")
        return blob_response(request, s, link.digest, "application/json", f"{name}.json",
                             render=schedule_json_bytes, etag_suffix="-json")
    link = _artifact(s, plan, number, f"schedule:{coll.value}")
    if format in XML_FORMATS:
        rev, n, _ = _revision(s, plan, number)
        if rev is not None and rev.status != "done":
            raise HTTPException(409, f"revision {n} of plan {plan_id} is {rev.status}: its XML is compiled by its "
                                     "worker (the revision's compile_pending); its schedules are served already")
        prefix = link.name.removesuffix(f"schedule:{coll.value}")
        return compiled_xml(s, request, plan_id, coll, format, options(format), prefix, principal=principal)
    if format == "npz":
        return blob_response(request, s, link.digest, NPZ, f"{plan_id}-r{number}-{coll.value}.npz")
    return blob_response(request, s, link.digest, "application/json", f"{plan_id}-r{number}-{coll.value}.json",
                         render=schedule_json_bytes, etag_suffix="-json")


@router.post("/{plan_id}/activate", response_model=ActivationOut, dependencies=[Depends(WRITE)],
             responses={**NOT_FOUND, 409: {"model": ErrorOut, "description": "not done, not provisioned on a "
                                                                             "look-ahead plane, hosts still busy, or "
                                                                             "panels not ready"},
                        413: BODY[413], 415: BODY[415]})
def activate(plan_id: str, request: Request, s: Session = Depends(get_session)):
    """Flip the 1x2 switches of a look-ahead plan's hosts (TopoOpt App. C): the plane it was provisioned on
    becomes their active plane. 409 while another plan still holds one of its hosts (release it first) or
    before every panel applied the plan's configuration."""
    plan = plan_or_404(s, plan_id)
    if plan.status != "done":
        raise HTTPException(409, f"plan {plan_id} is {plan.status}; activate it once it is done")
    try:
        out = fabrics.activate(s, plan_id)
    except fabrics.PlaneConflict as exc:
        raise HTTPException(409, str(exc)) from None
    s.commit()
    request.app.state.plan_cache.drop(plan_id)
    return out
