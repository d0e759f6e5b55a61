"""/v1/panels: the panel-controller protocol (DESIGN 4.6-4.7).

A panel agent polls GET /v1/panels/{panel}/config (ETag = the config version; If-None-Match answers 304;
?wait=S long-polls until a new version exists), applies the cross-connects (or the `diff` from what it last
reported) and reports PUT /v1/panels/{panel}/state. A plan becomes fabric_ready when every panel it touches
has applied the version that carries its connections, and stops being ready when one of them reports a
failure. A `degraded` report (the version applied, some of its cross-connects dark) gives every plan those
cross-connects carry a new revision (services.jobs.requests.failure_reports), and an applied report that completes a
repair gives the plan a revision back on its full topology.

Config views are served from memory (`PanelConfigCache`) and long polls wait on a notification of the panel's
next change (services.api.notify): neither reads the database while nothing changes.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from services.fabric import diff_connections
from services.fabric.crossconnect import config_digest
from services.jobs.requests import failure_reports
from services.store import fabrics
from services.store.db import session_scope
from services.store.models import PanelConfig, PanelRow, PanelState

from ..bodies import OffLoopRoute
from ..auth import READ, require_panel
from ..deps import Limit, Offset, get_session
from ..errors import unprocessable
from ..notify import until
from ..plan_access import utc
from ..responses import AUTH, BODY, COMMON
from ..schemas import ErrorOut, PanelConfigOut, PanelOut, PanelStateIn, PanelStateOut

router = APIRouter(route_class=OffLoopRoute, tags=["fabric"], responses={**COMMON, **AUTH})
LONG_POLL_MAX_S = 60.0
CONFIG_TTL_S = 5.0          # a cached view is re-read after this long (a change another process missed)
PanelId = Annotated[str, Path(max_length=100)]


class PanelConfigCache:
    """Serialised config views by panel. A published change of the panel drops its entry; a view read
    while a change was being published is not stored (the generation moved).

    An entry older than CONFIG_TTL_S (a change another process committed whose notification was lost) is
    still served while one background read replaces it (stale-while-revalidate, RFC 5861's rule): a panel's
    pollers never all wait on the database at once. Only a panel with no entry waits, for one read."""

    def __init__(self):
        self.items: dict[str, tuple[bytes, int, float]] = {}
        self.generation: dict[str, int] = {}
        self.lock = threading.Lock()
        self.loading: dict[str, asyncio.Lock] = {}         # one database read per panel at a time
        self.refreshing: dict[str, asyncio.Task] = {}      # background re-reads of expired entries

    def load_lock(self, panel_id: str) -> asyncio.Lock:
        lock = self.loading.get(panel_id)
        if lock is None:
            if len(self.loading) > 100_000:
                self.loading.clear()
            lock = self.loading[panel_id] = asyncio.Lock()
        return lock

    def get(self, panel_id: str) -> tuple[bytes, int, bool] | None:
        """(body, version, fresh) or None when the panel has no entry."""
        hit = self.items.get(panel_id)
        if hit is None:
            return None
        return hit[0], hit[1], hit[2] >= time.monotonic()

    def stamp(self, panel_id: str) -> int:
        return self.generation.get(panel_id, 0)

    def put(self, panel_id: str, stamp: int, body: bytes, version: int) -> None:
        with self.lock:
            if self.generation.get(panel_id, 0) == stamp:
                if len(self.items) > 100_000:
                    self.items.clear()
                self.items[panel_id] = (body, version, time.monotonic() + CONFIG_TTL_S)

    def refresh(self, panel_id: str, load) -> None:
        """Start one background re-read of an expired entry (`load()`: a coroutine that reads and puts)."""
        if panel_id in self.refreshing:
            return
        task = asyncio.get_running_loop().create_task(load())
        self.refreshing[panel_id] = task
        task.add_done_callback(lambda t: self._refreshed(panel_id, t))

    def _refreshed(self, panel_id: str, task: asyncio.Task) -> None:
        self.refreshing.pop(panel_id, None)
        if not task.cancelled() and task.exception() is not None:    # a deleted panel or the database away:
            with self.lock:                                           # the next request reads (and answers) it
                self.items.pop(panel_id, None)

    def changed(self, channel: str, key: str) -> None:
        if channel not in ("panel", "*"):
            return
        with self.lock:
            keys = list(self.items) if channel == "*" else [key]
            for k in keys:
                self.generation[k] = self.generation.get(k, 0) + 1
                self.items.pop(k, None)


def _config(url: str, panel_id: str) -> dict | None:
    with session_scope(url) as s:
        return fabrics.config_view(s, panel_id)


@router.get("/v1/panels", response_model=list[PanelOut], dependencies=[Depends(READ)], responses=AUTH)
def list_panels(response: Response, fabric_id: str | None = Query(None, max_length=100),
                limit: Limit = 100, offset: Offset = 0,
                s: Session = Depends(get_session)):
    """Every panel (or a fabric's), ordered by id: its latest config version against the version its agent
    last reported applied, that report, the pending diff's size and the active plans it carries. The diff
    itself is in GET /v1/panels/{panel_id}/config. X-Total-Count: panels that match."""
    views, total = fabrics.panel_views(s, fabric_id, limit, offset)
    response.headers["X-Total-Count"] = str(total)
    return [PanelOut(**{**v, "version_at": utc(v["version_at"]), "reported_at": utc(v["reported_at"])})
            for v in views]


async def _view(request: Request, panel_id: str) -> tuple[bytes, int]:
    cache: PanelConfigCache = request.app.state.panel_cache
    hit = cache.get(panel_id)
    if hit is not None:
        if not hit[2]:
            cache.refresh(panel_id, lambda: _load(request, panel_id))
        return hit[0], hit[1]
    async with cache.load_lock(panel_id):         # concurrent misses wait for one read
        hit = cache.get(panel_id)
        if hit is not None:
            return hit[0], hit[1]
        return await _load(request, panel_id)


async def _load(request: Request, panel_id: str) -> tuple[bytes, int]:
    """Read the panel's config view from the database and cache it (404 when the panel does not exist)."""
    cache: PanelConfigCache = request.app.state.panel_cache
    stamp = cache.stamp(panel_id)
    cfg = await run_in_threadpool(_config, request.app.state.settings.sqlalchemy_url, panel_id)
    if cfg is None:
        raise HTTPException(404, f"panel {panel_id} not found")
    body = json.dumps(cfg).encode()
    cache.put(panel_id, stamp, body, cfg["version"])
    return body, cfg["version"]


@router.get("/v1/panels/{panel_id}/config", response_model=PanelConfigOut,
            responses={**AUTH, 304: {"description": "unchanged (If-None-Match: the version the agent holds)"},
                       404: {"model": ErrorOut}})
async def panel_config(request: Request, panel_id: PanelId,
                       wait: float = Query(0, ge=0, le=LONG_POLL_MAX_S, allow_inf_nan=False,
                                           description="long poll: with If-None-Match, wait up to this many "
                                                       "seconds for a new version"),
                       _=Depends(require_panel())):
    """The panel's desired cross-connects (full list and the diff from its last report). ETag = version."""
    hub = request.app.state.hub
    seen = request.headers.get("if-none-match")
    deadline = time.monotonic() + wait
    while True:
        with hub.subscription("panel", panel_id) as changed:
            body, version = await _view(request, panel_id)
            etag = f'"{version}"'
            remaining = deadline - time.monotonic()
            if seen != etag or remaining <= 0:
                break
            await until(changed, min(remaining, CONFIG_TTL_S))
    if seen == etag:
        return Response(status_code=304, headers={"ETag": etag})
    return Response(content=body, media_type="application/json", headers={"ETag": etag})


@router.put("/v1/panels/{panel_id}/state", response_model=PanelStateOut,
            responses={**AUTH, **BODY, 404: {"model": ErrorOut}, 409: {"model": ErrorOut}})
def panel_state(body: PanelStateIn, request: Request, panel_id: PanelId, s: Session = Depends(get_session),
                p=Depends(require_panel())):
    """The agent reports the version it applied (or failed to apply) and the connections now present.

    Refused with 422 and nothing stored: a connection outside the panel's ports or a port used twice, and
    status `applied` with connections other than the acknowledged version's. Refused with 409: a version that
    does not exist yet, or a report not newer than the panel's last one (an older version: stale; the same
    version with a `sequence` not above the stored one's: a replay). Reports of one fabric are taken one at a
    time (its lock is held from the first read to the commit), and the answer comes after the commit: 503
    with Retry-After when it failed (nothing stored) or the lock was not free within 5 s."""
    if p.role == "viewer":
        raise HTTPException(403, "a viewer key cannot report panel state")
    # Checked before the fabric's lock, on what never changes once written (a panel's ports, version v's
    # cross-connects) or only grows (the latest version, the stored report): the lock is held for the
    # writes alone, which keeps a burst of reports of one fabric (every panel after a new plan) short.
    panel = s.get(PanelRow, panel_id)
    if panel is None:
        raise HTTPException(404, f"panel {panel_id} not found")
    latest = fabrics.latest_config(s, panel_id).version
    v = body.applied_version
    if v > latest:
        raise HTTPException(409, f"version {v} does not exist (latest is {latest})")
    stale = fabrics.newer(s.get(PanelState, panel_id), v, body.sequence)     # stale now: stale under the lock
    if stale is not None:
        raise HTTPException(409, stale)
    conns = None
    if body.connections is not None:
        conns = sorted(({"ingress": c.ingress, "egress": c.egress} for c in body.connections),
                       key=lambda c: (c["ingress"], c["egress"]))
        try:
            diff_connections(conns, [], panel=panel_id, ports=panel.ports)
        except ValueError as exc:
            raise unprocessable(["body", "connections"], str(exc)) from None
    if body.status in fabrics.APPLIED:
        cfg = s.get(PanelConfig, (panel_id, v))
        wanted = [] if cfg is None else cfg.connections
        if conns is None:
            conns = [{"ingress": c["ingress"], "egress": c["egress"]} for c in wanted]
        elif config_digest(conns) != config_digest(wanted):
            d = diff_connections(conns, wanted, panel=panel_id)
            raise unprocessable(["body", "connections"], (
                f"status '{body.status}' but the connections are not version {v}'s: {len(d.add)} of its "
                f"cross-connects missing, {len(d.remove)} others present; report status 'failed' with the "
                "connections the panel holds"))
    failed = _failed_items(body, conns or [], panel.ports, v)
    fabric_id = panel.fabric_id
    s.commit()                                 # end the reads' transaction: the lock starts a fresh one
    try:
        became_ready, changed = fabrics.report_state(s, panel_id, v, body.status, body.message, conns, body.sequence)
    except fabrics.StaleReport as exc:         # a newer report committed meanwhile
        raise HTTPException(409, str(exc)) from None
    if body.status in fabrics.APPLIED:            # the version's other cross-connects carry light: healthy
        failing = failure_reports.failure_matcher(failed)
        failure_reports.clear_faults(s, panel_id, [c for c in conns if not failing(c)])
    created = []
    if failed:
        failure_reports.record_faults(s, panel_id, v, [(side, f[side]) for f in failed for side in ("ingress", "egress")
                                                 if f[side] is not None], "panel")
        try:
            created = failure_reports.panel_failures(s, panel_id, v, failed, body.message)
        except failure_reports.RevisionConflict as exc:          # nothing of this report is stored
            s.rollback()
            raise HTTPException(409, str(exc)) from None
    created += failure_reports.repairs_applied(s, fabric_id)
    s.commit()
    request.app.state.metrics.panel_reports.labels(body.status).inc()
    for pid in set(changed) | {r.plan_id for r in created}:      # after the commit: no reader re-caches the old
        request.app.state.plan_cache.drop(pid)
    if any(r.status == "queued" for r in created):
        request.app.state.dispatcher.wake()
    base = str(request.base_url).rstrip("/")
    return {"panel": panel_id, "applied_version": v, "latest_version": latest,
            "status": body.status, "fabric_ready_plans": became_ready,
            "revisions": [{"plan_id": r.plan_id, "number": r.number, "kind": r.kind, "status": r.status,
                           "url": f"{base}/v1/plans/{r.plan_id}/revisions/{r.number}"} for r in created]}


def _failed_items(body: PanelStateIn, conns: list[dict], ports: int, version: int) -> list[dict]:
    """The failed cross-connects and ports of a degraded report, checked against the panel: ports in range
    and a named cross-connect one of the version's (422 naming the entry, nothing stored)."""
    if not body.failed:
        return []
    present = {(c["ingress"], c["egress"]) for c in conns}
    out = []
    for i, f in enumerate(body.failed):
        for side in ("ingress", "egress"):
            x = getattr(f, side)
            if x is not None and x >= ports:
                raise unprocessable(["body", "failed", i, side], f"the panel has ports 0..{ports - 1}, got {x}")
        if f.ingress is not None and f.egress is not None and (f.ingress, f.egress) not in present:
            raise unprocessable(["body", "failed", i], f"{f.ingress}->{f.egress} is not a cross-connect of version "
                                                       f"{version}")
        out.append({"ingress": f.ingress, "egress": f.egress})
    return out
