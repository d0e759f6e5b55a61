"""What the plan routes and the revision routes share (services.api.routes.plans, .revisions; routes do not
import each other): the plan or 404, UTC timestamps, the compile options of an XML request, the compiled XML
of a schedule (stored, refused, or queued for a worker), and a stored schedule's JSON view.
"""
from __future__ import annotations

from datetime import timezone
from typing import Literal

from fastapi import HTTPException, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from services.compiler.api import PROFILES as RUNTIME_PROFILES
from services.compiler.api import CompileOptions, check_options
from services.compiler.canonical import canonical_options
from services.compiler.errors import CompileError
from services.compiler.runtimes.names import DEFAULT_RUNTIME, MSCCL_RUNTIMES, Format, Runtime
from services.jobs.stages import artifacts
from services.jobs.stages.compile_units import range_unit
from services.store import compiles, repo
from services.synthesis.schedule.ir import Collective

from . import budget
from .auth import Principal
from .blobs import blob_response
from .errors import unprocessable
from .schemas import CompileAccepted, ErrorOut

__all__ = ["NOT_FOUND", "utc", "plan_or_404", "compile_query", "compiled_xml", "range_xml", "compiled_view",
           "compile_failed", "schedule_json_bytes"]

MscclRuntimeName = Literal[tuple(r.value for r in MSCCL_RUNTIMES)]      # executor, rccl, legacy
RuntimeName = Literal[tuple(r.value for r in (*MSCCL_RUNTIMES, Runtime.ONECCL))]     # and oneccl
NOT_FOUND = {404: {"model": ErrorOut, "description": "unknown plan"}}
RUNTIME_CHANNELS = ", ".join(f"{name} {p.max_channels}" for name, p in RUNTIME_PROFILES.items())
MAX_RUNTIME_CHANNELS = max(p.max_channels for p in RUNTIME_PROFILES.values())


def utc(dt):
    """SQLite hands back naive datetimes (stored in UTC); PostgreSQL aware ones: always answer in UTC."""
    return dt.replace(tzinfo=timezone.utc) if dt is not None and dt.tzinfo is None else dt


def plan_or_404(s: Session, plan_id: str):
    """The plan, or 404."""
    p = repo.get_plan(s, plan_id)
    if p is None:
        raise HTTPException(404, f"plan {plan_id} not found")
    return p


def compile_query(
        runtime: RuntimeName | None = Query(
            None, description="the runtime of the XML: executor (format=msccl's default), rccl, legacy (MSCCL "
                              "runtimes, format=msccl), oneccl (format=oneccl, its only runtime)"),
        proto: Literal["Simple", "LL", "LL128"] | None = Query(None, description="NCCL protocol"),
        inplace: Literal["out", "in", "both"] | None = Query(
            None, description="calls the file serves (default: the runtime's, docs/runtimes.md)"),
        min_bytes: int | None = Query(None, ge=0, le=1 << 62, description="smallest selected size"),
        max_bytes: int | None = Query(None, ge=0, le=1 << 62, description="largest selected size "
                                      "(executor/RCCL: 0 = unbounded)"),
        channels: int | None = Query(None, ge=1, le=MAX_RUNTIME_CHANNELS, description=(
            f"channels per link (default: fit); channels x instances at most the runtime's channels: "
            f"{RUNTIME_CHANNELS} (422 naming the limit beyond it)")),
        instances: int = Query(1, ge=1, le=MAX_RUNTIME_CHANNELS, description=(
            f"program copies on 1/instances of each chunk; at most the runtime's channels: {RUNTIME_CHANNELS} "
            "(the oneccl format has none: ignored)")),
        max_chunks: int = Query(64, ge=1, le=4096, description="bound on chunks per shard"),
        consolidate: Literal["auto", "yes", "no"] = Query("auto", description="scratch consolidation"),
        max_steps: int | None = Query(None, ge=1, le=65536, description="steps per thread block of a custom "
                                      "executor build")):
    """The compile options of an XML request (format=msccl|oneccl) as query parameters: a function of the
    format that returns its CompileOptions (422 for a runtime with format=oneccl)."""
    def options(fmt: str) -> CompileOptions:
        if fmt == Format.ONECCL and runtime not in (None, Runtime.ONECCL.value):
            raise _unprocessable("runtime", f"runtime {runtime} is an MSCCL runtime (format=msccl); format=oneccl "
                                 "has only the oneccl runtime", "value_error")
        if fmt == Format.MSCCL and runtime == Runtime.ONECCL.value:
            raise _unprocessable("runtime", "runtime oneccl is served as format=oneccl; format=msccl takes "
                                 "executor, rccl or legacy", "value_error")
        named = Runtime(runtime) if runtime else (Runtime.ONECCL if fmt == Format.ONECCL else DEFAULT_RUNTIME)
        return CompileOptions(named.value, proto=proto,
                              inplace=inplace, min_bytes=min_bytes, max_bytes=max_bytes, channels=channels,
                              instances=instances, max_chunks=max_chunks,
                              consolidate={"auto": None, "yes": True, "no": False}[consolidate], max_steps=max_steps)
    return options


_OPTION_FIELD = {"proto": "proto", "inplace": "inplace", "max_bytes": "max_bytes", "instances": "instances",
                 "max_channels": "channels", "collective": "collective", "runtime": "runtime"}


def _unprocessable(field: str, msg: str, kind: str) -> HTTPException:
    return unprocessable(["query", field], msg, kind)


def compiled_xml(s: Session, request: Request, plan_id: str, coll: Collective, fmt: str, options: CompileOptions,
                 prefix: str = "", *, principal: Principal, index: int | None = None):
    """The stored XML (200), the stored refusal (422), or 202 while a worker compiles it. Nothing is compiled
    here: a missing job is recorded in the outbox (services.store.jobs) and the dispatcher sends it to a
    worker, which runs it under the task limits (a lost worker's job is sent again by its heartbeat). Every
    spelling of the same options is one job (services.compiler.canonical), so identical requests share it;
    a new job counts against the caller's bound (services.api.budget: 429 beyond it)."""
    try:
        check_options(options, coll.value)
    except CompileError as exc:
        field = _OPTION_FIELD.get(exc.limit or "", "runtime")
        raise _unprocessable(field, str(exc), "value_error") from None
    options = canonical_options(options, coll.value)     # one job for every spelling of the same file
    key = options.key()
    unit = coll.value if index is None else f"{coll.value}@{index}"      # services.jobs.stages.compile_units
    owner = None
    if compiles.get(s, plan_id, prefix + unit, key) is None:
        owner = budget.room(s, principal, request.app.state.settings)      # 429 at the key's bound
    job, created = compiles.request(s, plan_id, unit, options, prefix, owner=owner)
    if created:
        s.commit()
        request.app.state.dispatcher.wake()
    if job.status == "done":
        suffix = options.runtime if fmt == Format.MSCCL else Runtime.ONECCL.value
        name = f"{plan_id}-{prefix.rstrip(':')}-" if prefix else f"{plan_id}-"
        part = coll.value if index is None else f"{coll.value}-range{index}"
        return blob_response(request, s, job.digest, "application/xml", f"{name}{part}-{suffix}.xml")
    if job.status == "failed":
        limit = (job.meta or {}).get("limit") or "fit"
        raise _unprocessable("runtime", f"cannot compile the {coll.value} schedule for {options.runtime}: {job.reason}",
                             f"compile_refused.{limit}")
    url = str(request.url)
    body = CompileAccepted(status=job.status, collective=coll.value, format=fmt, runtime=options.runtime,
                           options=key, url=url)
    return JSONResponse(body.model_dump(), status_code=202,
                        headers={"Location": url, "Retry-After": "2", "Cache-Control": "no-store"})


def range_xml(s: Session, request: Request, plan_id: str, coll: Collective, fmt: str, options: CompileOptions,
              index: int, by_size: list[dict] | None, prefix: str = "", *, principal: Principal):
    """The XML of size range `index` of the collective's schedule set: its schedule compiled with minBytes/
    maxBytes set to the range's window (services.jobs.stages.compile_units; compiled at plan time for the plan's
    runtimes, otherwise on demand like `compiled_xml`). 404 without that range; 422 for oneCCL (no size
    window), min_bytes given, or a legacy range above the files' maxBytes."""
    link = repo.plan_artifact(s, plan_id, f"{prefix}schedule:{coll.value}@{index}")
    if link is None or not by_size or index >= len(by_size):
        raise HTTPException(404, f"plan {plan_id} has no size range {index} of its {coll.value} set")
    if fmt == Format.ONECCL:
        raise _unprocessable("format", "oneCCL files have no minBytes/maxBytes window, so a size range's file cannot "
                             "be selected by size there: download the range as json or npz, or the collective's "
                             "oneccl file without range", "value_error")
    main = repo.plan_artifact(s, plan_id, f"{prefix}schedule:{coll.value}")
    try:
        unit = range_unit(coll.value, index, options, by_size, link.digest, main.digest if main else None)
    except CompileError as exc:
        raise _unprocessable(exc.limit if exc.limit in ("min_bytes", "max_bytes") else "range", str(exc),
                             "value_error") from None
    if unit.alias:
        return compiled_xml(s, request, plan_id, coll, fmt, unit.options, prefix, principal=principal)
    return compiled_xml(s, request, plan_id, coll, fmt, unit.options, prefix, principal=principal, index=index)


def compiled_view(compiled: dict, schedule_url, links: dict) -> dict:
    """A plan's or revision's `compiled` with each file's URL (`schedule_url(c)`: the collective's schedule
    URL without query), size ranges' too (`&range=i`), added to `links` as `xml:<runtime>:<c>`."""
    out = {}
    for runtime, per in compiled.items():
        query = "format=oneccl" if runtime == Runtime.ONECCL else f"format=msccl&runtime={runtime}"
        out[runtime] = {}
        for c, summary in per.items():
            url = f"{schedule_url(c)}?{query}"
            entry = {**summary, "url": url}
            if summary.get("by_size"):
                entry["by_size"] = [{**r, "url": f"{url}&range={r['range']}"} for r in summary["by_size"]]
            out[runtime][c] = entry
            links[f"xml:{runtime}:{c}"] = url
    return out


def compile_failed(compiled: dict | None) -> list[dict] | None:
    """The files of `compiled` (as stored) that failed or were refused: runtime, file, reason."""
    if not compiled:
        return None
    out = []
    for runtime, per in compiled.items():
        for c, summary in per.items():
            for name, x in [(c, summary)] + [(f"{c}@{r['range']}", r) for r in summary.get("by_size") or []]:
                if x.get("status") == "failed":
                    out.append({"runtime": runtime, "file": name, "reason": x.get("reason")})
    return out


def schedule_json_bytes(npz: bytes) -> bytes:
    """The JSON view of a stored schedule blob (services.jobs.stages.artifacts.schedule_json_bytes); 422 naming
    `format` beyond its JSON_MAX_TRANSFERS transfers (format=npz serves any size)."""
    try:
        return artifacts.schedule_json_bytes(npz)
    except artifacts.TooManyTransfers as exc:
        raise unprocessable(["query", "format"], str(exc)) from None
