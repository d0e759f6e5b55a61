"""/v1/panels: the panel-controller protocol (DESIGN 4.6-4.7).

A panel agent polls GET /v1/panels/{panel}/config (ETag = the config version; If-None-Match answers 304;
?wait=S long-polls until a new version exists), applies the cross-connects (or the `diff` from what it last
reported) and reports PUT /v1/panels/{panel}/state. A plan becomes fabric_ready when every panel it touches
has applied the version that carries its connections.
"""
from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from services.store import fabrics
from services.store.db import session_scope
from services.store.models import PanelRow

from ..auth import READ, require_panel
from ..deps import get_session
from ..responses import AUTH
from ..schemas import ErrorOut, PanelOut, PanelStateIn
from .plans import utc

router = APIRouter(tags=["fabric"])
LONG_POLL_MAX_S = 60.0


def _config(url: str, panel_id: str) -> dict | None:
    with session_scope(url) as s:
        return fabrics.config_view(s, panel_id)


@router.get("/v1/panels", response_model=list[PanelOut], dependencies=[Depends(READ)], responses=AUTH)
def list_panels(response: Response, fabric_id: str | None = Query(None, max_length=100),
                limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0),
                s: Session = Depends(get_session)):
    """Every panel (or a fabric's), ordered by id: its latest config version against the version its agent
    last reported applied, that report, the pending diff's size and the active plans it carries. The diff
    itself is in GET /v1/panels/{panel_id}/config. X-Total-Count: panels that match."""
    views, total = fabrics.panel_views(s, fabric_id, limit, offset)
    response.headers["X-Total-Count"] = str(total)
    return [PanelOut(**{**v, "version_at": utc(v["version_at"]), "reported_at": utc(v["reported_at"])})
            for v in views]


@router.get("/v1/panels/{panel_id}/config", responses={**AUTH, 304: {"description": "unchanged"},
                                                        404: {"model": ErrorOut}})
async def panel_config(panel_id: str, request: Request, wait: float = Query(0, ge=0, le=LONG_POLL_MAX_S),
                       _=Depends(require_panel())):
    """The panel's desired cross-connects (full list and the diff from its last report). ETag = version."""
    url = request.app.state.settings.sqlalchemy_url
    cfg = await run_in_threadpool(_config, url, panel_id)
    if cfg is None:
        raise HTTPException(404, f"panel {panel_id} not found")
    seen = request.headers.get("if-none-match")
    deadline = time.monotonic() + wait
    while seen == f'"{cfg["version"]}"' and time.monotonic() < deadline:
        await asyncio.sleep(0.1)                      # long poll: any process may write the next version
        cfg = await run_in_threadpool(_config, url, panel_id)
    etag = f'"{cfg["version"]}"'
    if seen == etag:
        return Response(status_code=304, headers={"ETag": etag})
    return Response(content=__import__("json").dumps(cfg), media_type="application/json", headers={"ETag": etag})


@router.put("/v1/panels/{panel_id}/state", responses={**AUTH, 404: {"model": ErrorOut}, 409: {"model": ErrorOut}})
def panel_state(panel_id: str, body: PanelStateIn, request: Request, s: Session = Depends(get_session),
                p=Depends(require_panel())):
    """The agent reports the version it applied (or failed to apply) and the connections now present."""
    if p.role == "viewer":
        raise HTTPException(403, "a viewer key cannot report panel state")
    panel = s.get(PanelRow, panel_id)
    if panel is None:
        raise HTTPException(404, f"panel {panel_id} not found")
    latest = fabrics.latest_config(s, panel_id).version
    if body.applied_version > latest:
        raise HTTPException(409, f"version {body.applied_version} does not exist (latest is {latest})")
    ready = fabrics.report_state(s, panel_id, body.applied_version, body.status, body.message, body.connections)
    for pid in ready:
        request.app.state.plan_cache.drop(pid)
    return {"panel": panel_id, "applied_version": body.applied_version, "latest_version": latest,
            "status": body.status, "fabric_ready_plans": ready}
