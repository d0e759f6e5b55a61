"""FastAPI application factory: `create_app()` (uvicorn --factory services.api.app:create_app)."""
from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from services.config import Settings, get_settings
from services.store import notify
from services.store.db import migrate

from . import errors, openapi_doc
from .allow import AllowedMethods
from .metrics import DatabaseCollector, Metrics, mark_process_dead
from .auth import KeyCache
from .dispatch import Dispatcher
from .guard import InputGuard
from .notify import ChangeFeed, Hub, PgListener
from .query_guard import reject_unknown_query
from .routes import (artifacts, cluster, dashboard, exports, fabrics, frontiers, health, panels, placements, plans,
                     revisions, stats, topologies)
from .routes.panels import PanelConfigCache
from .routes.plans import PlanCache

log = logging.getLogger("fabricplan.api")


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


def create_app(settings: Settings | None = None) -> FastAPI:
    st = settings or get_settings()
    hub = Hub()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if st.embedded:
            migrate(st.sqlalchemy_url)                 # Alembic is the only schema path
        hub.bind(asyncio.get_running_loop())
        notify.set_sink(hub.publish)                   # changes this process commits wake its waiters
        if st.sqlalchemy_url.startswith("postgresql"):
            listener = PgListener(st.sqlalchemy_url, hub)   # changes other processes commit
        else:
            listener = ChangeFeed(st.sqlalchemy_url, hub)   # the same on SQLite (serve --workers N)
        listener.start()
        app.state.dispatcher.start()
        try:
            yield
        finally:
            app.state.dispatcher.stop()
            mark_process_dead()
            listener.stop()
            notify.set_sink(None)

    app = FastAPI(title="fabricplan", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,
                  dependencies=[Depends(reject_unknown_query)],
                  generate_unique_id_function=openapi_doc.operation_id,
                  description="Direct-connect topologies, collective schedules and cross-connects for "
                              "optically patched ML clusters.")
    app.state.settings = st
    app.state.metrics = Metrics(embedded_worker=st.embedded)
    app.state.db_metrics = DatabaseCollector(st.sqlalchemy_url, None if st.embedded else st.broker_url,
                                             alive_within_s=max(3 * st.sweep_s, 5.0))
    app.state.hub = hub
    app.state.dispatcher = Dispatcher(st, hub.publish)
    app.state.plan_cache = PlanCache()
    app.state.key_cache = KeyCache()
    app.state.panel_cache = PanelConfigCache()
    hub.on_change(app.state.panel_cache.changed)
    hub.on_change(app.state.plan_cache.changed)        # a revision or a fabric change of a finished plan
    app.add_middleware(AllowedMethods)                 # inside CORS: a preflight is CORS's to answer
    if st.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=st.cors_origins, allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(InputGuard)
    app.add_middleware(TimingMiddleware, metrics=app.state.metrics)
    errors.install(app)
    for module in (panels, plans, revisions, frontiers, topologies, artifacts, fabrics, exports, placements, cluster,
                   stats, health):
        app.include_router(module.router)
    dashboard.mount(app)                               # `/`, /docs and /redoc from local files only
    openapi_doc.install(app)                           # operation ids, optional auth, typed bodies
    return app
