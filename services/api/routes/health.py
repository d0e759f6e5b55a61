"""Liveness, readiness and Prometheus metrics."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.exc import SQLAlchemyError

from services.store import jobs, repo
from services.store.db import ping, session_scope

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
    "description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}})
def metrics(request: Request):
    """Prometheus metrics (services.api.metrics): the API processes' counters (summed over every process of
    `serve --workers N`) and what the database counts at the scrape (queues, job and compile durations,
    revisions, workers). With FABRICPLAN_API_KEYS_REQUIRED it needs a scheduler or viewer key, like every
    other read (Prometheus: `authorization: {credentials: <viewer key>}` in the scrape config)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from ..metrics import scrape_registry

    try:
        with session_scope(request.app.state.settings.sqlalchemy_url) as s:
            request.app.state.metrics.set_plans_by_status(repo.plans_by_status(s))
            request.app.state.metrics.set_jobs(jobs.counts(s))
    except SQLAlchemyError:             # the database is down: /readyz says so; serve the other metrics
        pass
    registry = scrape_registry(request.app.state.metrics, request.app.state.db_metrics)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
