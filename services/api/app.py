"""FastAPI application factory: `create_app()` (uvicorn --factory services.api.app:create_app)."""
from __future__ import annotations

import logging
import threading
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.config import Settings, get_settings
from services.store import repo
from services.store.db import migrate, session_scope

from .auth import KeyCache
from .compile_dispatch import CompileDispatcher
from .dispatch import Dispatcher
from .routes import artifacts, fabrics, frontiers, health, panels, plans, topologies
from .routes.plans import PlanCache

log = logging.getLogger("fabricplan.api")


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Histogram("fabricplan_http_request_seconds", "HTTP request latency",
                                  ["method", "route", "status"], registry=self.registry)
        self.plans_created = Counter("fabricplan_plans_created_total", "plans accepted", registry=self.registry)
        self.plans_by_status = Gauge("fabricplan_plans", "plans by status", ["status"], registry=self.registry)


class TimingMiddleware:
    """Request latency histogram as a plain ASGI middleware (BaseHTTPMiddleware costs far more per request)."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status["code"])).observe(time.perf_counter() - t0)


def _sweeper(app: FastAPI, stop: threading.Event) -> None:
    """Fails plans whose worker died without redelivery (no progress for stale_plan_s)."""
    st: Settings = app.state.settings
    while not stop.wait(min(60.0, st.stale_plan_s / 4)):
        try:
            with session_scope(st.sqlalchemy_url) as s:
                for pid in repo.fail_stale(s, st.stale_plan_s):
                    log.warning("plan %s failed: worker lost", pid)
        except Exception:                               # pragma: no cover - keep sweeping
            log.exception("stale-plan sweep failed")


def create_app(settings: Settings | None = None) -> FastAPI:
    st = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if st.embedded:
            migrate(st.sqlalchemy_url)                 # Alembic is the only schema path
        app.state.dispatcher.start()
        app.state.compiles.start()
        if st.embedded:                                # plans orphaned by a previous embedded process
            with session_scope(st.sqlalchemy_url) as s:
                orphans = [p.id for p in repo.list_plans(s, limit=10000) if p.status in ("queued", "running")]
            for pid in orphans:
                app.state.dispatcher.submit(pid)
        stop = threading.Event()
        sweeper = threading.Thread(target=_sweeper, args=(app, stop), daemon=True, name="fabricplan-sweeper")
        sweeper.start()
        try:
            yield
        finally:
            stop.set()
            app.state.dispatcher.stop()
            app.state.compiles.stop()

    app = FastAPI(title="fabricplan", version="0.1.0", lifespan=lifespan,
                  description="Direct-connect topologies, collective schedules and cross-connects for "
                              "optically patched ML clusters.")
    app.state.settings = st
    app.state.metrics = Metrics()
    app.state.dispatcher = Dispatcher(st)
    app.state.compiles = CompileDispatcher(st)
    app.state.plan_cache = PlanCache()
    app.state.key_cache = KeyCache()
    if st.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=st.cors_origins, allow_methods=["*"], allow_headers=["*"])

    app.add_middleware(TimingMiddleware, metrics=app.state.metrics)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        errors = [{"loc": list(e.get("loc", ())), "field": ".".join(str(x) for x in e.get("loc", ())[1:]),
                   "msg": e.get("msg"), "type": e.get("type")} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": errors})

    for module in (plans, frontiers, topologies, artifacts, fabrics, panels, health):
        app.include_router(module.router)
    return app
