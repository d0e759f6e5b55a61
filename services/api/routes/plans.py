"""/v1/plans: submit (idempotent), inspect, events, artifacts (DESIGN 4.1-4.4)."""
from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from datetime import timezone

from typing import Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from services import planner
from services.compiler.api import CompileOptions, check_options
from services.compiler.errors import CompileError
from services.store import compiles, repo
from services.synthesis.topology.catalog import build
from services.synthesis.schedule.ir import Collective, Schedule

from services.store.db import session_scope

from ..auth import READ, WRITE
from ..deps import get_session
from ..responses import AUTH
from ..schemas import CompileAccepted, ErrorOut, PlanAccepted, PlanEventOut, PlanOut, PlanRequest

router = APIRouter(prefix="/v1/plans", tags=["plans"])
NOT_FOUND = {404: {"model": ErrorOut, "description": "unknown plan"}}


def utc(dt):
    """SQLite hands back naive datetimes (stored in UTC); PostgreSQL aware ones: always answer in UTC."""
    return dt.replace(tzinfo=timezone.utc) if dt is not None and dt.tzinfo is None else dt


def plan_out(p, base: str) -> PlanOut:
    r = p.result or {}
    links = {"self": f"{base}/v1/plans/{p.id}", "events": f"{base}/v1/plans/{p.id}/events"}
    schedules = None
    if r.get("schedules"):
        schedules = {}
        for c, sm in r["schedules"].items():
            url = f"{base}/v1/plans/{p.id}/schedules/{c}"
            schedules[c] = {**sm, "url": url}
            links[f"schedule:{c}"] = url
        links["topology"] = f"{base}/v1/plans/{p.id}/topology"
    fabric = None
    if r.get("fabric"):
        binding = p.binding
        fabric = {**r["fabric"], "fabric_ready": bool(binding and binding.fabric_ready),
                  "released": bool(binding and binding.released)}
        links["fabric"] = f"{base}/v1/plans/{p.id}/fabric"
    compiled = None
    if r.get("compiled"):
        compiled = {}
        for runtime, per in r["compiled"].items():
            fmt = "oneccl" if runtime == "oneccl" else "msccl"
            query = f"format={fmt}" + ("" if fmt == "oneccl" else f"&runtime={runtime}")
            compiled[runtime] = {}
            for c, summary in per.items():
                url = f"{base}/v1/plans/{p.id}/schedules/{c}?{query}"
                compiled[runtime][c] = {**summary, "url": url}
                links[f"xml:{runtime}:{c}"] = url
    return PlanOut(id=p.id, job_id=p.job_id, status=p.status, progress={"fraction": p.progress, "stage": p.stage},
                   reason=p.reason, created_at=utc(p.created_at), updated_at=utc(p.updated_at), request=p.request,
                   topology=r.get("topology"), frontier=r.get("frontier"), schedules=schedules,
                   predicted_time_us=r.get("predicted_time_us"), baselines_time_us=r.get("baselines_time_us"),
                   fabric=fabric, compiled=compiled, links=links)


@router.post("", status_code=202, response_model=PlanAccepted, dependencies=[Depends(WRITE)],
             responses={**AUTH, 409: {"model": ErrorOut, "description": "Idempotency-Key reused with another body"}})
def create_plan(body: PlanRequest, request: Request, response: Response, s: Session = Depends(get_session),
                idempotency_key: str | None = Header(default=None, max_length=200)):
    """Plan a job: frontier, selection for the workload, verified schedules. Returns at once (202); poll
    the plan URL. The same Idempotency-Key with the same body returns the same plan."""
    try:
        plan, created = repo.create_plan(s, body.model_dump(mode="json"), idempotency_key)
    except repo.Conflict as exc:
        raise HTTPException(409, str(exc)) from None
    s.commit()
    if created:
        request.app.state.metrics.plans_created.inc()
        request.app.state.dispatcher.submit(plan.id)
    url = f"{str(request.base_url).rstrip('/')}/v1/plans/{plan.id}"
    response.headers["Location"] = url
    if not created:
        response.status_code = 200
    return PlanAccepted(id=plan.id, status=plan.status, url=url)


@router.get("", response_model=list[PlanOut], dependencies=[Depends(READ)])
def list_plans(request: Request, job_id: str | None = None, limit: int = Query(50, ge=1, le=500),
               s: Session = Depends(get_session)):
    base = str(request.base_url).rstrip("/")
    return [plan_out(p, base) for p in repo.list_plans(s, job_id, limit)]


def _plan(s: Session, plan_id: str):
    p = repo.get_plan(s, plan_id)
    if p is None:
        raise HTTPException(404, f"plan {plan_id} not found")
    return p


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

    def put(self, key, value) -> None:
        with self.lock:
            self.items[key] = value
            if len(self.items) > self.size:
                self.items.popitem(last=False)


@router.get("/{plan_id}", response_model=PlanOut, responses={**NOT_FOUND, **AUTH}, dependencies=[Depends(READ)])
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
        p = _plan(s, plan_id)
        settled = p.binding is None or p.binding.fabric_ready or p.binding.released
        return plan_out(p, base).model_dump_json().encode(), p.status in repo.TERMINAL and settled


@router.get("/{plan_id}/events", response_model=list[PlanEventOut], responses={**NOT_FOUND, **AUTH},
            dependencies=[Depends(READ)])
def plan_events(plan_id: str, s: Session = Depends(get_session)):
    return [PlanEventOut(at=utc(e.at), status=e.status, stage=e.stage, progress=e.progress, message=e.message)
            for e in _plan(s, plan_id).events]


def _blob_response(request: Request, data: bytes, digest: str, media_type: str, filename: str) -> Response:
    etag = f'"{digest}"'
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"ETag": etag})
    return Response(data, media_type=media_type, headers={
        "ETag": etag, "Cache-Control": "private, max-age=31536000, immutable",
        "Content-Disposition": f'attachment; filename="{filename}"'})


@router.get("/{plan_id}/topology", responses={**NOT_FOUND, **AUTH, 409: {"model": ErrorOut}},
            dependencies=[Depends(READ)])
def plan_topology(plan_id: str, request: Request, format: str = Query("json", pattern="^(json|graphml)$"),
                  s: Session = Depends(get_session)):
    """The chosen topology as JSON (arcs [tail, head, lane]) or GraphML. Content-addressed, with ETag."""
    p = _plan(s, plan_id)
    link = repo.plan_artifact(s, plan_id, "topology")
    if link is None:
        raise HTTPException(409, f"plan {plan_id} is {p.status}; the topology exists once it is done")
    data, art = repo.get_blob(s, link.digest)
    if format == "graphml":
        topo = build(json.loads(data)["expr"])
        return _blob_response(request, planner.topology_graphml(topo), link.digest + "-graphml",
                              "application/graphml+xml", f"{plan_id}.graphml")
    return _blob_response(request, data, link.digest, "application/json", f"{plan_id}-topology.json")


_OPTION_FIELD = {"proto": "proto", "inplace": "inplace", "max_bytes": "max_bytes", "instances": "instances",
                 "max_channels": "channels", "collective": "collective", "runtime": "runtime"}


def _unprocessable(field: str, msg: str, kind: str) -> HTTPException:
    return HTTPException(422, [{"loc": ["query", field], "field": field, "msg": msg, "type": kind}])


@router.get("/{plan_id}/schedules/{collective}",
            responses={**NOT_FOUND, **AUTH, 409: {"model": ErrorOut},
                       202: {"model": CompileAccepted, "description": "the XML is being compiled: poll the url"},
                       422: {"description": "invalid options, or nothing fits the runtime (the limit is named)"}},
            dependencies=[Depends(READ)])
def plan_schedule(plan_id: str, collective: str, request: Request,
                  format: str = Query("json", pattern="^(json|npz|msccl|oneccl)$"),
                  runtime: Literal["executor", "rccl", "legacy"] | None = Query(
                      None, description="MSCCL runtime (format=msccl): executor (default), rccl, legacy"),
                  proto: Literal["Simple", "LL", "LL128"] | None = Query(None, description="NCCL protocol"),
                  inplace: Literal["out", "in", "both"] | None = Query(
                      None, description="calls the file serves (default: the runtime's, docs/runtimes.md)"),
                  min_bytes: int | None = Query(None, ge=0, le=1 << 62, description="smallest selected size"),
                  max_bytes: int | None = Query(None, ge=0, le=1 << 62, description="largest selected size "
                                                "(executor/RCCL: 0 = unbounded)"),
                  channels: int | None = Query(None, ge=1, le=128, description="channels per link (default: fit)"),
                  instances: int = Query(1, ge=1, le=128, description="program copies on 1/instances of each chunk"),
                  max_chunks: int = Query(64, ge=1, le=4096, description="bound on chunks per shard"),
                  consolidate: Literal["auto", "yes", "no"] = Query("auto", description="scratch consolidation"),
                  max_steps: int | None = Query(None, ge=1, le=65536, description="steps per thread block of a "
                                                "custom executor build"),
                  s: Session = Depends(get_session)):
    """A verified schedule: `npz` is the compact IR blob; `json` lists the paper's tuples per step; `msccl` and
    `oneccl` are the runtimes' XML, compiled in a worker (at plan time for the plan's runtimes with default
    options) and checked before it is stored. For options not compiled yet the answer is 202 with a URL to
    poll; a compile that finds nothing fitting the runtime answers 422 naming the limit (kept, like files)."""
    try:
        coll = Collective.parse(collective)
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None
    p = _plan(s, plan_id)
    link = repo.plan_artifact(s, plan_id, f"schedule:{coll.value}")
    if link is None:
        raise HTTPException(409, f"plan {plan_id} is {p.status}; schedules exist once it is done")
    if format in ("msccl", "oneccl"):
        if format == "oneccl" and runtime is not None:
            raise _unprocessable("runtime", "runtime selects an MSCCL runtime; format=oneccl has none", "value_error")
        options = CompileOptions(runtime or ("oneccl" if format == "oneccl" else "executor"), proto=proto,
                                 inplace=inplace, min_bytes=min_bytes, max_bytes=max_bytes, channels=channels,
                                 instances=instances, max_chunks=max_chunks,
                                 consolidate={"auto": None, "yes": True, "no": False}[consolidate],
                                 max_steps=max_steps)
        return _compiled(s, request, plan_id, coll, format, options)
    data, _ = repo.get_blob(s, link.digest)
    if format == "npz":
        return _blob_response(request, data, link.digest, "application/x-npz", f"{plan_id}-{coll.value}.npz")
    sched = Schedule.from_bytes(data)
    steps = []
    for t in range(1, sched.steps + 1):
        sl = sched.step_slice(t)
        steps.append({"step": t, "op": "reduce" if sched.ops[t - 1] else "copy",
                      "transfers": [[int(v), int(a), int(b), int(l), int(lo), int(hi)] for v, a, b, l, lo, hi in
                                    zip(sched.source[sl], sched.sender[sl], sched.receiver[sl], sched.lane[sl],
                                        sched.lo[sl], sched.hi[sl])]})
    body = json.dumps({"collective": sched.collective.value, "nodes": sched.nodes, "grid": sched.grid,
                       "topology": sched.topology, "columns": ["shard", "sender", "receiver", "lane", "lo", "hi"],
                       "chunk_unit": f"1/{sched.grid} of a shard", "steps": steps}).encode()
    return _blob_response(request, body, link.digest + "-json", "application/json", f"{plan_id}-{coll.value}.json")


def _compiled(s: Session, request: Request, plan_id: str, coll: Collective, fmt: str, options: CompileOptions):
    """The stored XML (200), the stored refusal (422), or 202 while a worker compiles it. Nothing is compiled
    here: a missing (or lost) job is recorded and handed to the compile dispatcher."""
    try:
        check_options(options, coll.value)
    except CompileError as exc:
        field = _OPTION_FIELD.get(exc.limit or "", "runtime")
        raise _unprocessable(field, str(exc), "value_error") from None
    key = options.key()
    job, created = compiles.claim(s, plan_id, coll.value, key)
    st = request.app.state.settings
    if created or compiles.is_stale(job, st.compile_time_limit_s + 300):
        if not created:
            compiles.requeue(s, job)
        s.commit()
        request.app.state.compiles.submit(plan_id, coll.value, options)
    if job.status == "done":
        data, _ = repo.get_blob(s, job.digest)
        suffix = options.runtime if fmt == "msccl" else "oneccl"
        return _blob_response(request, data, job.digest, "application/xml", f"{plan_id}-{coll.value}-{suffix}.xml")
    if job.status == "failed":
        limit = (job.meta or {}).get("limit") or "fit"
        raise _unprocessable("runtime", f"cannot compile the {coll.value} schedule for {options.runtime}: {job.reason}",
                             f"compile_refused.{limit}")
    url = str(request.url)
    body = CompileAccepted(status=job.status, collective=coll.value, format=fmt, runtime=options.runtime,
                           options=key, url=url)
    return JSONResponse(body.model_dump(), status_code=202,
                        headers={"Location": url, "Retry-After": "2", "Cache-Control": "no-store"})


@router.delete("/{plan_id}/fabric", responses={**NOT_FOUND, **AUTH}, dependencies=[Depends(WRITE)])
def release_fabric(plan_id: str, request: Request, s: Session = Depends(get_session)):
    """The job is over: free the plan's hosts and ports; its cross-connects leave the next panel configs."""
    from services.store import fabrics

    _plan(s, plan_id)
    b = fabrics.release_plan(s, plan_id)
    if b is None:
        raise HTTPException(404, f"plan {plan_id} is not bound to a fabric")
    request.app.state.plan_cache.drop(plan_id)
    return {"plan_id": plan_id, "fabric_id": b.fabric_id, "released": True}
