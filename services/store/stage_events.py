"""Stage events: a job's stage recorded in its plan's events with its start, end and duration.

When a plan (or one of its revisions, whose stages are named `rev{n}:{stage}`) moves to another stage, the
event of the new stage carries `started_at`, and an event closing the previous stage carries `started_at` (from
its start event), `ended_at` and `duration_s`. A finished or failed job closes the stage it was in.
"""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import select
from sqlalchemy.orm import Session

from . import job_metrics
from .models import PlanEvent, utcnow

__all__ = ["aware", "stage_start", "close_stage", "record"]

NOT_STAGES = frozenset({"queued", "done", "failed", "cancelled", "revision"})
"""Plan stages that are states, not work: nothing to time."""


def aware(t: datetime | None) -> datetime | None:
    """SQLite hands datetimes back without their zone: they are stored in UTC."""
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def stage_start(s: Session, plan_id: str, stage: str) -> datetime | None:
    """When the latest run of `stage` started (its start event), or None."""
    return aware(s.scalar(select(PlanEvent.started_at).where(
        PlanEvent.plan_id == plan_id, PlanEvent.stage == stage, PlanEvent.started_at.is_not(None),
        PlanEvent.ended_at.is_(None)).order_by(PlanEvent.id.desc()).limit(1)))


def close_stage(s: Session, plan_id: str, stage: str | None, *, status: str, progress: float,
                now: datetime | None = None, message: str | None = None) -> PlanEvent | None:
    """The event ending `stage` (its start, end and duration), when it is a stage that started."""
    if not stage or stage.split(":")[-1] in NOT_STAGES:
        return None
    start = stage_start(s, plan_id, stage)
    if start is None:
        return None
    now = now or utcnow()
    duration = max(0.0, (now - start).total_seconds())
    ev = PlanEvent(plan_id=plan_id, status=status, stage=stage, progress=progress, at=now, started_at=start,
                   ended_at=now, duration_s=duration,
                   message=message or f"{stage.split(':')[-1]} took {duration:.2f} s")
    s.add(ev)
    if ":" not in stage:        # a plan's own stage (a revision's are `rev{n}:{stage}`)
        job_metrics.observe(s, "fabricplan_plan_stage_duration_seconds", (stage,), duration)
    return ev


def record(s: Session, plan_id: str, previous: str | None, stage: str, *, status: str, progress: float,
           message: str | None = None, now: datetime | None = None) -> PlanEvent:
    """The event of a job at `stage` (after `previous`): when the stage changes, the previous one is closed and
    this event starts the new one."""
    now = now or utcnow()
    new = previous != stage
    if new:
        close_stage(s, plan_id, previous, status=status, progress=progress, now=now)
    ev = PlanEvent(plan_id=plan_id, status=status, stage=stage, progress=progress, message=message, at=now,
                   started_at=now if new and stage.split(":")[-1] not in NOT_STAGES else None)
    s.add(ev)
    return ev
