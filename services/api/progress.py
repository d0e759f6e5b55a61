"""A running job's `progress` block: its weighted fraction (services.jobs.stages.stage_weights), stage, and
the ETA from the time it has been running (the start of its first stage in the plan's events)."""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.jobs.stages.stage_weights import eta_s
from services.store.models import PlanEvent, utcnow
from services.store.stage_events import aware

__all__ = ["progress_block"]


def progress_block(s: Session, plan_id: str, status: str, fraction: float, stage: str,
                   revision: int | None = None) -> dict:
    """{fraction, stage, eta_s}: eta_s only while the job runs (a plan, or its revision `revision`)."""
    out = {"fraction": fraction, "stage": stage}
    if status != "running":
        return out
    q = select(func.min(PlanEvent.started_at)).where(PlanEvent.plan_id == plan_id, PlanEvent.started_at.is_not(None))
    if revision is None:
        q = q.where(PlanEvent.stage.not_like("rev%:%"))
    else:
        q = q.where(PlanEvent.stage.like(f"rev{revision}:%"))
    started = aware(s.scalar(q))
    if started is not None:
        eta = eta_s(fraction, (utcnow() - started).total_seconds())
        if eta is not None:
            out["eta_s"] = round(eta, 1)
    return out
