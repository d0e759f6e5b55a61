"""/v1/frontiers, /v1/topologies/evaluate, /v1/artifacts, health, readiness and metrics."""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from sqlalchemy.orm import Session

from services import planner
from services.store import repo
from services.store.db import ping
from services.synthesis.bfb.lp import ScheduleTooLarge, bfb_allgather, bfb_schedule
from services.synthesis.topology.catalog import build
from services.synthesis.topology.families import edges as edges_topology
from services.synthesis.search.finder import bounds
from services.synthesis.schedule.report import schedule_summary
from services.synthesis.schedule.ir import Collective
from services.synthesis.schedule.verify import verify

from .auth import READ
from .deps import get_session
from .schemas import ErrorOut, EvaluateOut, EvaluateRequest, FrontierOut

router = APIRouter(tags=["topologies"], dependencies=[Depends(READ)])
EVALUATE_MAX_NODES = 1024


@router.get("/v1/frontiers", response_model=FrontierOut)
def get_frontier(nodes: int = Query(ge=2, le=4096), degree: int = Query(ge=1, le=16), bidirectional: bool = False):
    """The Pareto frontier for (N, d), cached in the database."""
    entries, cached = planner.frontier_entries(nodes, degree, bidirectional)
    b = bounds(nodes, degree)
    return FrontierOut(nodes=nodes, degree=degree, bidirectional=bidirectional, cached=cached,
                       bound={"steps": b["steps"], "tau": float(b["tau"]), "tau_exact": str(b["tau"])}, entries=entries)


@router.post("/v1/topologies/evaluate", response_model=EvaluateOut,
             responses={422: {"description": "invalid expression or graph"}})
def evaluate(body: EvaluateRequest):
    """BFB schedule and costs of a topology given as an expression or an explicit edge list (model-checked)."""
    try:
        if body.expr is not None:
            topo = build(body.expr)
        else:
            bad = [e for e in body.edges if not (0 <= e[0] < body.nodes and 0 <= e[1] < body.nodes)]
            if bad:
                raise ValueError(f"edge {list(bad[0])} names a node outside 0..{body.nodes - 1}")
            topo = edges_topology(body.nodes, *[tuple(e) for e in body.edges])
        if topo.nodes > EVALUATE_MAX_NODES:
            raise ValueError(f"{topo.nodes} nodes: synchronous evaluation is limited to {EVALUATE_MAX_NODES}; "
                             "submit a plan instead")
        coll = Collective.parse(body.collective)
        t0 = time.perf_counter()
        result = bfb_allgather(topo)
        sched = bfb_schedule(topo, coll, allgather=result.schedule)
        seconds = time.perf_counter() - t0
    except (ValueError, ScheduleTooLarge) as exc:
        raise HTTPException(422, [{"loc": ["body", "expr" if body.expr is not None else "edges"],
                                   "msg": str(exc), "type": "value_error"}]) from None
    report = verify(sched, topo)
    out = schedule_summary(topo, report, seconds, coll)
    return EvaluateOut(**{k: out[k] for k in EvaluateOut.model_fields})


@router.get("/v1/artifacts/{digest}", responses={404: {"model": ErrorOut}})
def get_artifact(digest: str, request: Request, s: Session = Depends(get_session)):
    """Any stored blob by its content address."""
    found = repo.get_blob(s, digest)
    if found is None:
        raise HTTPException(404, f"artifact {digest} not found")
    data, art = found
    etag = f'"{digest}"'
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"ETag": etag})
    return Response(data, media_type=art.media_type.removesuffix("+zlib"), headers={"ETag": etag})


health = APIRouter(tags=["health"])


@health.get("/healthz")
def healthz():
    return {"status": "ok"}


@health.get("/readyz", responses={503: {"description": "a dependency is down"}})
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


@health.get("/metrics", response_class=Response)
def metrics(request: Request):
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
