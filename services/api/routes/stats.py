"""/v1/stats: what the dashboard's health strip shows - plans by status, the queue of every kind of job, panels
out of sync."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from sqlalchemy import String, and_, cast, func, not_, or_, select
from sqlalchemy.orm import Session

from services.store import jobs, repo
from services.store.models import FabricRow, PanelConfig, PanelRow, PanelState

from ..auth import READ
from ..deps import get_session
from ..responses import AUTH, DATABASE
from ..schemas import StatsOut

router = APIRouter(tags=["health"])


@router.get("/v1/stats", response_model=StatsOut, dependencies=[Depends(READ)], responses={**AUTH, **DATABASE})
def stats(request: Request, s: Session = Depends(get_session)):
    """Plans by status, unfinished jobs of every kind (plans, evaluations, compiles, revisions), the queue depth
    (jobs of any kind no worker has started), fabrics, panels, and the panels whose agent has not applied
    their latest config version (a panel with no cross-connects to hold, holding none, is not behind). Counted
    by the database."""
    counts = repo.plans_by_status(s)
    queued = jobs.counts(s)
    latest = (select(PanelConfig.panel_id, func.max(PanelConfig.version).label("version"))
              .group_by(PanelConfig.panel_id).subquery())
    # a panel whose latest version has no cross-connects, and whose agent holds none (or never reported), has
    # nothing to apply: not out of sync
    empty = and_(cast(PanelConfig.connections, String) == "[]",
                 or_(PanelState.connections.is_(None), cast(PanelState.connections, String).in_(["[]", "null"])))
    behind = s.scalar(select(func.count()).select_from(latest)
                      .join(PanelConfig, and_(PanelConfig.panel_id == latest.c.panel_id,
                                              PanelConfig.version == latest.c.version))
                      .outerjoin(PanelState, PanelState.panel_id == latest.c.panel_id)
                      .where(func.coalesce(PanelState.applied_version, 0) < latest.c.version, not_(empty)))
    return StatsOut(plans=counts, jobs=queued, queue_depth=sum(per["queued"] for per in queued.values()),
                    fabrics=s.scalar(select(func.count()).select_from(FabricRow)),
                    panels=s.scalar(select(func.count()).select_from(PanelRow)), panels_out_of_sync=behind)
