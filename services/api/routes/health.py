"""Liveness, readiness and Prometheus metrics."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response

from services.store.db import ping

from ..auth import READ
from ..responses import AUTH
from ..schemas import HealthOut, ReadyOut

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut)
async def healthz(request: Request):
    """Liveness, answered on the event loop by nothing else; `api_keys_required` tells clients (the
    dashboard) to ask for a key before they call."""
    return {"status": "ok", "api_keys_required": request.app.state.settings.api_keys_required}


@router.get("/readyz", response_model=ReadyOut, responses={503: {"model": ReadyOut, "description": "a dependency is down"}})
def readyz(request: Request, response: Response):
    """Ready when the database (and, in the scaled deployment, the broker) answer."""
    st = request.app.state.settings
    checks = {}
    try:
        ping(st.sqlalchemy_url)
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    if st.embedded:
        checks["broker"] = "embedded"
    else:
        try:
            from workers.app import celery_app

            with celery_app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"error: {type(exc).__name__}"
    ok = all(v in ("ok", "embedded") for v in checks.values())
    response.status_code = 200 if ok else 503
    return {"status": "ready" if ok else "not ready", "checks": checks}


@router.get("/metrics", response_class=Response, dependencies=[Depends(READ)], responses={**AUTH, 200: {
    "description": "Prometheus text format, or OpenMetrics when the Accept header asks for "
                   "application/openmetrics-text",
    "content": {"text/plain": {"schema": {"type": "string"}},
                "application/openmetrics-text": {"schema": {"type": "string"}}}}})
def metrics(request: Request):
    """Prometheus metrics (services.api.metrics): counters and histograms observed when their event happens
    (requests, plans accepted, panel reports, job, stage and compile durations, revisions; summed over every
    process of `serve --workers N`) and the state the database counts at the scrape in a constant number of
    queries (plans by status, unfinished jobs, queue depth, workers alive). OpenMetrics with `Accept:
    application/openmetrics-text`, else the Prometheus text format. With FABRICPLAN_API_KEYS_REQUIRED it needs
    a scheduler or viewer key, like every other read (Prometheus: `authorization: {credentials: <viewer key>}`
    in the scrape config)."""
    from ..metrics import render, scrape_registry

    registry = scrape_registry(request.app.state.metrics, request.app.state.db_metrics)
    body, content_type = render(registry, request.headers.get("accept"))
    return Response(body, headers={"Content-Type": content_type})
