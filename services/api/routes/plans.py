"""/v1/plans: submit (idempotent), inspect, events, artifacts (DESIGN 4.1-4.4)."""
from __future__ import annotations

import hashlib
import io
import json
import threading
from collections import OrderedDict
from typing import Literal

import numpy as np
from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from starlette.concurrency import run_in_threadpool
from sqlalchemy.orm import Session, object_session

from services.jobs.requests import workloads
from services.store import fabrics, jobs, repo
from services.store.db import session_scope
from services.synthesis.schedule.ir import Collective

from .. import budget
from ..bodies import OffLoopRoute
from ..auth import READ, WRITE, Principal
from ..blobs import NPZ, blob_response
from ..deps import Limit, Offset, get_session
from ..errors import unprocessable
from ..plan_access import (NOT_FOUND, compile_failed, compile_query, compiled_view, compiled_xml, plan_or_404, range_xml, schedule_json_bytes,
                           utc)
from ..downloads import (CONFLICT, NOT_MODIFIED, SCHEDULE_DOWNLOAD, TOPOLOGY_DOWNLOAD, XML_FORMATS,
                         ScheduleCollectivePath, ScheduleFormat, TopologyFormat, node_link_render)
from ..progress import progress_block
from ..responses import AUTH, BODY, COMMON, COMPILE_REFUSED, TOO_MANY
from ..revision_views import plan_revision_ref
from ..schemas import (CompileAccepted, ErrorOut, LinkLoadsOut, PlanAccepted, PlanEventOut, PlanOut, PlanRequest,
                       PlanStatus)

router = APIRouter(route_class=OffLoopRoute, prefix="/v1/plans", tags=["plans"], responses={**COMMON, **AUTH})
FABRIC_REFUSAL = {404: "fabric_not_found", 409: "hosts_taken", 422: "fabric_mismatch"}


def _progress(p) -> dict:
    s = object_session(p)
    if s is None:
        return {"fraction": p.progress, "stage": p.stage}
    return progress_block(s, p.id, p.status, p.progress, p.stage)


def plan_out(p, base: str) -> PlanOut:
    r = p.result or {}
    links = {"self": f"{base}/v1/plans/{p.id}", "events": f"{base}/v1/plans/{p.id}/events"}
    schedules = None
    if r.get("schedules"):
        schedules = {}
        for c, sm in r["schedules"].items():
            url = f"{base}/v1/plans/{p.id}/schedules/{c}"
            schedules[c] = {**sm, "url": url}
            if sm.get("by_size"):
                schedules[c]["by_size"] = [{**row, "url": f"{url}?range={i}"} for i, row in enumerate(sm["by_size"])]
            links[f"schedule:{c}"] = url
        links["topology"] = f"{base}/v1/plans/{p.id}/topology"
    fabric = None
    if r.get("fabric"):
        binding = p.binding
        fabric = {**r["fabric"], "fabric_ready": bool(binding and binding.fabric_ready),
                  "released": bool(binding and binding.released)}
        if binding is not None:       # live: a repair moves the versions, activation the plane
            fabric["panels"] = binding.required_versions
            if "plane" in fabric:
                fabric["plane"] = binding.assignment.get("plane", fabric["plane"])
        links["fabric"] = f"{base}/v1/plans/{p.id}/fabric"
        if fabric["released"] and "ready_estimate_s" in fabric:      # nothing will be patched for it
            fabric["ready_estimate_s"] = None
        elif fabric["fabric_ready"] and "ready_estimate_s" in fabric:
            fabric["ready_estimate_s"] = 0.0
    compiled = None
    if r.get("compiled"):
        compiled = compiled_view(r["compiled"], lambda c: f"{base}/v1/plans/{p.id}/schedules/{c}", links)
    revision = plan_revision_ref(p, base)
    if revision is not None:
        links["revisions"] = revision["list_url"]
    alltoall = r.get("alltoall")
    if alltoall and alltoall.get("status") == "built":
        alltoall = {**alltoall, "url": links.get("schedule:alltoall")}
    return PlanOut(id=p.id, job_id=p.job_id, status=p.status, progress=_progress(p),
                   reason=p.reason, created_at=utc(p.created_at), updated_at=utc(p.updated_at), request=p.request,
                   topology=r.get("topology"), frontier=r.get("frontier"), schedules=schedules,
                   predicted_time_us=r.get("predicted_time_us"), barrier_time_us=r.get("barrier_time_us"),
                   baselines_time_us=r.get("baselines_time_us"),
                   fabric=fabric, compiled=compiled, compile_failed=compile_failed(r.get("compiled")),
                   revision=revision, training=r.get("training"), alltoall=alltoall,
                   training_hybrid=r.get("training_hybrid"), topology_strategy=r.get("topology_strategy"),
                   links=links)


@router.post("", status_code=202, response_model=PlanAccepted,
             responses={**AUTH, **BODY, **TOO_MANY,
                        200: {"model": PlanAccepted, "description": "a replay: this Idempotency-Key and body "
                                                                    "already made this plan"},
                        202: {"model": PlanAccepted, "description": "accepted: the plan is queued"},
                        404: {"model": ErrorOut, "description": "the fabric_id names no registered fabric"},
                        409: {"model": ErrorOut, "description": "Idempotency-Key reused with another body, or the "
                                                               "fabric's hosts (the named ones, or enough free "
                                                               "ones) are held by other plans"}})
def create_plan(body: PlanRequest, request: Request, response: Response, s: Session = Depends(get_session),
                idempotency_key: str | None = Header(default=None, min_length=1, max_length=200),
                principal: Principal = Depends(WRITE)):
    """Plan a job: frontier, selection for the workload (message sizes, or a training job: the topology with the
    smallest simulated iteration time), verified schedules (an all-to-all schedule too when the workload has
    one). Returns at once (202) with the plan recorded; a worker takes it from there (when the broker is down,
    as soon as it is back). Poll the plan URL. The same Idempotency-Key with the same body returns the same
    plan (200); Idempotency-Keys belong to the API key that sent them (another key's equal Idempotency-Key
    makes its own plan). A fabric-bound plan is checked against its fabric first: no such fabric is a 404, a degree
    above its ports per host, unknown hosts or more nodes than it has hosts a 422, hosts held by other plans
    a 409 (field `fabric_id`, `degree`, `hosts` or `nodes`)."""
    try:                              # the typed request (PlanSpec), carried by every stage from the store:
        if workloads.is_training(body):   # what depends on N (a catalogued model's experts and batch)
            workloads.check_training(body)
        workloads.check_topology(body)    # and what the topology strategy needs, refused before accepting
    except workloads.WorkloadInputError as exc:
        raise unprocessable(["body", *exc.loc], exc.msg) from None
    try:
        plan, created = repo.create_plan(s, body.dump(), idempotency_key,
                                         jobs.owner_name(principal.role, principal.key_id),
                                         normalise=lambda stored: PlanRequest.load(stored).dump())
    except repo.Conflict as exc:
        raise HTTPException(409, str(exc)) from None
    if created and body.fabric_id:
        try:                          # what the fabric stage would refuse, refused now (not by a worker)
            fabrics.check_plan(s, body.fabric_id, body.nodes, body.degree, body.hosts, bool(body.lookahead))
        except fabrics.PlanRefused as exc:
            s.rollback()
            raise unprocessable(["body", exc.field], exc.reason, FABRIC_REFUSAL[exc.status], exc.status) from None
    if created:
        budget.admit(s, plan, principal, request.app.state.settings)
    s.commit()
    if created:
        request.app.state.metrics.plans_created.inc()
        request.app.state.dispatcher.wake()
    url = f"{str(request.base_url).rstrip('/')}/v1/plans/{plan.id}"
    response.headers["Location"] = url
    if not created:
        response.status_code = 200
    return PlanAccepted(id=plan.id, status=plan.status, url=url)


@router.get("", response_model=list[PlanOut], dependencies=[Depends(READ)], responses=AUTH)
def list_plans(request: Request, response: Response, job_id: str | None = Query(None, max_length=200),
               status: list[PlanStatus] | None = Query(None, description="any of these statuses (repeatable)"),
               fabric_id: str | None = Query(None, max_length=100, description="plans bound to this fabric"),
               nodes: int | None = Query(None, ge=2, le=4096), degree: int | None = Query(None, ge=1, le=16),
               view: Literal["full", "summary"] = Query("full", description="`summary` leaves out the frontier, "
                                                        "schedules, predicted and baseline times, the training "
                                                        "block and the compiled files (list views)"),
               limit: Limit = 100, offset: Offset = 0,
               s: Session = Depends(get_session)):
    """Plans, newest first, filtered (filters combine with AND) and paginated; X-Total-Count is the number
    of plans that match the filters."""
    base = str(request.base_url).rstrip("/")
    filters = {"status": status, "fabric_id": fabric_id, "nodes": nodes, "degree": degree}
    response.headers["X-Total-Count"] = str(repo.count_plans(s, job_id, **filters))
    out = [plan_out(p, base) for p in repo.list_plans(s, job_id, limit, offset=offset, **filters)]
    if view == "summary":
        out = [p.model_copy(update=dict.fromkeys(SUMMARY_OMITS)) for p in out]
    return out


SUMMARY_OMITS = ("frontier", "schedules", "predicted_time_us", "barrier_time_us", "baselines_time_us", "training",
                 "training_hybrid", "compiled")


class PlanCache:
    """Serialised bodies of finished plans (done and failed plans never change again), LRU-bounded, so the
    polling GET of a finished plan costs no database round trip."""

    def __init__(self, size: int = 4096):
        self.size, self.items, self.lock = size, OrderedDict(), threading.Lock()

    def get(self, key):
        with self.lock:
            hit = self.items.get(key)
            if hit is not None:
                self.items.move_to_end(key)
            return hit

    def drop(self, plan_id: str) -> None:
        with self.lock:
            for k in [k for k in self.items if k[0] == plan_id]:
                del self.items[k]

    def changed(self, channel: str, key: str) -> None:
        """A published change (services.api.notify): a plan's fabric readiness or release."""
        if channel == "plan":
            self.drop(key)
        elif channel == "*":
            with self.lock:
                self.items.clear()

    def put(self, key, value) -> None:
        with self.lock:
            self.items[key] = value
            if len(self.items) > self.size:
                self.items.popitem(last=False)


@router.get("/{plan_id}", response_model=PlanOut, responses={**NOT_FOUND, **AUTH, 304: {
    "description": "unchanged (If-None-Match with the ETag of a finished plan)"}}, dependencies=[Depends(READ)])
async def get_plan(plan_id: str, request: Request):
    """Status, progress, chosen topology, frontier, schedules and links. Finished plans carry an ETag."""
    base = str(request.base_url).rstrip("/")
    cache: PlanCache = request.app.state.plan_cache
    hit = cache.get((plan_id, base))          # finished plans: served from memory on the event loop
    if hit is None:
        body, terminal = await run_in_threadpool(_load_plan_body, request.app.state.settings.sqlalchemy_url,
                                                 plan_id, base)
        if not terminal:
            return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})
        hit = (body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
        cache.put((plan_id, base), hit)
    body, etag = hit
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"ETag": etag})
    return Response(body, media_type="application/json", headers={"ETag": etag})


def _load_plan_body(url: str, plan_id: str, base: str) -> tuple[bytes, bool]:
    """(body, cacheable): finished plans never change, except a fabric binding that is not yet ready."""
    with session_scope(url) as s:
        p = plan_or_404(s, plan_id)
        settled = p.binding is None or p.binding.fabric_ready or p.binding.released
        return plan_out(p, base).model_dump_json().encode(), p.status in repo.TERMINAL and settled


@router.get("/{plan_id}/events", response_model=list[PlanEventOut], responses={**NOT_FOUND, **AUTH},
            dependencies=[Depends(READ)])
def plan_events(plan_id: str, s: Session = Depends(get_session)):
    """The plan's events, oldest first: its status, stage, progress and message at each change; a stage's start
    event carries `started_at`, the event closing it `started_at`, `ended_at` and `duration_s` (a revision's
    stages are named `rev{n}:{stage}`)."""
    return [PlanEventOut(at=utc(e.at), status=e.status, stage=e.stage, progress=e.progress, message=e.message,
                         started_at=utc(e.started_at) if e.started_at else None,
                         ended_at=utc(e.ended_at) if e.ended_at else None, duration_s=e.duration_s)
            for e in plan_or_404(s, plan_id).events]


@router.get("/{plan_id}/topology", responses={**NOT_FOUND, **AUTH, **CONFLICT, **NOT_MODIFIED,
                                              200: TOPOLOGY_DOWNLOAD}, dependencies=[Depends(READ)])
def plan_topology(plan_id: str, request: Request, format: TopologyFormat = Query("json"),
                  s: Session = Depends(get_session)):
    """The chosen topology as JSON (arcs [tail, head, lane]), GraphML (nodes with their `rank`), or networkx
    node-link JSON (`format=node-link`), stored when the plan was made. Content-addressed, with ETag."""
    p = plan_or_404(s, plan_id)
    name = "topology:graphml" if format == "graphml" else "topology"
    link = repo.plan_artifact(s, plan_id, name)
    if link is None:
        raise HTTPException(409, f"plan {plan_id} is {p.status}; the topology exists once it is done"
                            if p.status != "done" else f"plan {plan_id} has no stored {format} topology "
                            "(planned before it was stored); submit it again")
    if format == "graphml":
        return blob_response(request, s, link.digest, "application/graphml+xml", f"{plan_id}.graphml")
    if format == "node-link":
        return blob_response(request, s, link.digest, "application/json", f"{plan_id}-node-link.json",
                             render=node_link_render, etag_suffix="-node-link")
    return blob_response(request, s, link.digest, "application/json", f"{plan_id}-topology.json")


@router.get("/{plan_id}/schedules/{collective}", responses={
    **NOT_FOUND, **AUTH, **CONFLICT, **NOT_MODIFIED, 200: SCHEDULE_DOWNLOAD,
    202: {"model": CompileAccepted, "description": "the XML is being compiled in a worker: poll the url"},
    **COMPILE_REFUSED, **TOO_MANY})
def plan_schedule(plan_id: str, collective: ScheduleCollectivePath, request: Request,
                  format: ScheduleFormat = Query("json"),
                  range_: int | None = Query(None, alias="range", ge=0, le=1 << 20,
                                             description="a size range of the schedule set (by_size[range])"),
                  options=Depends(compile_query), s: Session = Depends(get_session),
                  principal: Principal = Depends(READ)):
    """A verified schedule: `npz` is the compact IR blob; `json` lists the paper's tuples per step; `msccl` and
    `oneccl` are the runtimes' XML, compiled in a worker (at plan time for the plan's runtimes with default
    options) and checked before it is stored. For options not compiled yet the answer is 202 with a URL to
    poll; a compile that finds nothing fitting the runtime answers 422 naming the limit (kept, like files).
    `alltoall` exists for plans whose workload has an all-to-all (alltoall_bytes, or MoE layers). `range=i`
    serves size range i of the collective's schedule set (`schedules.<collective>.by_size[i]`): json, npz, or
    msccl with minBytes/maxBytes set to the range (compiled at plan time for the plan's runtimes: `compiled.
    <runtime>.<collective>.by_size`; min_bytes is taken from the range; oneccl has no size window: 422)."""
    try:
        coll = Collective.parse(collective)
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None
    p = plan_or_404(s, plan_id)
    link = repo.plan_artifact(s, plan_id, f"schedule:{coll.value}")
    if link is None:
        raise _schedule_missing(p, coll)
    if range_ is not None:
        if format in XML_FORMATS:
            by_size = (((p.result or {}).get("schedules") or {}).get(coll.value) or {}).get("by_size")
            return range_xml(s, request, plan_id, coll, format, options(format), range_, by_size,
                             principal=principal)
        link = repo.plan_artifact(s, plan_id, f"schedule:{coll.value}@{range_}")
        if link is None:
            raise HTTPException(404, f"plan {plan_id} has no size range {range_} of its {coll.value} set")
        name = f"{plan_id}-{coll.value}-range{range_}"
        if format == "npz":
            return blob_response(request, s, link.digest, "application/x-npz", f"{name}.npz")
        return blob_response(request, s, link.digest, "application/json", f"{name}.json",
                             render=schedule_json_bytes, etag_suffix="-json")
    if format in XML_FORMATS:
        return compiled_xml(s, request, plan_id, coll, format, options(format), principal=principal)
    if format == "npz":
        return blob_response(request, s, link.digest, NPZ, f"{plan_id}-{coll.value}.npz")
    return blob_response(request, s, link.digest, "application/json", f"{plan_id}-{coll.value}.json",
                         render=schedule_json_bytes, etag_suffix="-json")


def _schedule_missing(p, coll: Collective) -> HTTPException:
    """A plan without this schedule: not done yet (409), an all-to-all that was refused (409 with the reason),
    or a workload without an all-to-all (404)."""
    if p.status != "done":
        return HTTPException(409, f"plan {p.id} is {p.status}; schedules exist once it is done")
    a2a = (p.result or {}).get("alltoall") or {}
    if coll is Collective.ALLTOALL and a2a.get("status") == "refused":
        return HTTPException(409, f"plan {p.id} has no all-to-all schedule: {a2a.get('reason')}")
    if coll is Collective.ALLTOALL:
        return HTTPException(404, f"plan {p.id} has no all-to-all schedule: its workload has no all-to-all "
                                  "(alltoall_bytes, or a training job's MoE layers)")
    return HTTPException(409, f"plan {p.id} has no stored {coll.value} schedule")


@router.get("/{plan_id}/schedules/{collective}/loads", response_model=LinkLoadsOut,
            responses={**NOT_FOUND, **AUTH, **CONFLICT}, dependencies=[Depends(READ)])
def plan_link_loads(plan_id: str, collective: ScheduleCollectivePath, s: Session = Depends(get_session),
                    max_links: int = Query(256, ge=1, le=4096, description="at most this many link columns; "
                                           "beyond it consecutive arcs share a column holding their maximum")):
    """What each link carries in each comm step (the heat map of where the bandwidth goes), in shards
    (M/N bytes), with each step's maximum; tau = d/N * the sum of the step maxima. Read from the loads
    stored with the schedule by the worker (409 for a plan without them)."""
    try:
        coll = Collective.parse(collective)
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None
    p = plan_or_404(s, plan_id)
    link = repo.plan_artifact(s, plan_id, f"loads:{coll.value}")
    if link is None:
        raise _stored_loads_missing(p, coll)
    digest = link.digest
    with np.load(io.BytesIO(repo.get_blob(s, digest)[0])) as z:
        loads, grid = z["loads"].astype(np.int64), int(z["grid"][0])
    topo = json.loads(repo.get_blob(s, repo.plan_artifact(s, plan_id, "topology").digest)[0])
    return link_loads_view(loads, grid, topo, coll.value, max_links)


def _stored_loads_missing(p, coll: Collective) -> HTTPException:
    """Loads are stored by the worker with the schedule; nothing is computed (or written to a finished plan)
    in a request, so a plan that has none (not done yet, or finished before they were stored) gets 409; a plan
    without an all-to-all schedule answers as for the schedule itself."""
    if coll is Collective.ALLTOALL:
        return _schedule_missing(p, coll)
    if p.status != "done":
        return HTTPException(409, f"plan {p.id} is {p.status}; link loads exist once it is done")
    return HTTPException(409, f"plan {p.id} finished before link loads were stored with its schedules; "
                              "submit it again to get them")


def link_loads_view(loads: np.ndarray, grid: int, topo: dict, collective: str, max_links: int) -> dict:
    """loads (steps, arcs) in grid units -> the heat map's columns: one per arc when there are at most
    `max_links`, else groups of consecutive arcs (arc order: by tail node) holding the group's maximum, so
    each step's maximum survives the grouping. O(steps * arcs). The unit is a shard (M/N bytes; the grid
    divides one), or for an all-to-all a block (D/N bytes; the grid divides the buffer of N blocks), so
    tau = d/N * the sum of the step maxima either way."""
    if collective == Collective.ALLTOALL.value:
        grid, unit = grid // topo["nodes"], "block (D/N bytes)"
    else:
        unit = "shard (M/N bytes)"
    steps, arcs = loads.shape
    width = -(-arcs // max_links)
    starts = np.arange(0, arcs, width)
    columns = np.maximum.reduceat(loads, starts, axis=1) if arcs else loads
    arc_list = topo["arcs"]
    if width == 1:
        links = [{"first_arc": i, "last_arc": i, "tail": a[0], "last_tail": a[0], "head": a[1], "lane": a[2]}
                 for i, a in enumerate(arc_list)]
    else:
        links = []
        for a in starts.tolist():
            last = min(a + width, arcs) - 1
            links.append({"first_arc": a, "last_arc": last, "tail": arc_list[a][0], "last_tail": arc_list[last][0],
                          "head": None, "lane": None})
    step_max = loads.max(axis=1, initial=0)
    return {"collective": collective, "nodes": topo["nodes"], "degree": topo["degree"], "steps": steps,
            "arcs": arcs, "arcs_per_column": width, "unit": unit, "links": links,
            "loads": (columns / grid).tolist(), "step_max": (step_max / grid).tolist(),
            "step_mean": (loads.mean(axis=1) / grid).tolist() if arcs else [0.0] * steps,
            "tau": topo["degree"] * float(step_max.sum()) / (topo["nodes"] * grid)}


@router.delete("/{plan_id}/fabric", responses={**NOT_FOUND, **AUTH}, dependencies=[Depends(WRITE)])
def release_fabric(plan_id: str, request: Request, s: Session = Depends(get_session)):
    """The job is over: free the plan's hosts and ports; its cross-connects leave the next panel configs.
    Answered once committed (503 with Retry-After when the commit failed: nothing is released)."""
    from services.store import fabrics

    plan_or_404(s, plan_id)
    b = fabrics.release_plan(s, plan_id)
    if b is None:
        raise HTTPException(404, f"plan {plan_id} is not bound to a fabric")
    fabric_id = b.fabric_id
    s.commit()
    request.app.state.plan_cache.drop(plan_id)
    return {"plan_id": plan_id, "fabric_id": fabric_id, "released": True}
