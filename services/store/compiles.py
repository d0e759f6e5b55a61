"""Compile jobs (models.CompileJob): the one place that reads and writes them. Callers own the transaction."""
from __future__ import annotations

from datetime import timedelta, timezone

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .models import CompileJob, utcnow

__all__ = ["get", "claim", "start", "requeue", "finish", "fail", "is_stale"]


def get(s: Session, plan_id: str, collective: str, options: str) -> CompileJob | None:
    return s.get(CompileJob, (plan_id, collective, options))


def claim(s: Session, plan_id: str, collective: str, options: str) -> tuple[CompileJob, bool]:
    """(job, created): the existing job, or a new queued one (a concurrent request may have created it)."""
    job = get(s, plan_id, collective, options)
    if job is not None:
        return job, False
    job = CompileJob(plan_id=plan_id, collective=collective, options=options, status="queued")
    try:
        with s.begin_nested():
            s.add(job)
    except IntegrityError:
        existing = get(s, plan_id, collective, options)
        if existing is None:
            raise
        return existing, False
    return job, True


def start(s: Session, job: CompileJob) -> None:
    job.status, job.updated_at = "running", utcnow()


def requeue(s: Session, job: CompileJob) -> None:
    job.status, job.reason, job.updated_at = "queued", None, utcnow()


def finish(s: Session, job: CompileJob, digest: str, meta: dict) -> None:
    job.status, job.digest, job.meta, job.reason, job.updated_at = "done", digest, meta, None, utcnow()


def fail(s: Session, job: CompileJob, reason: str, meta: dict | None = None) -> None:
    job.status, job.reason, job.meta, job.updated_at = "failed", reason, meta, utcnow()


def is_stale(job: CompileJob, older_than_s: float) -> bool:
    """A queued or running job untouched this long lost its worker (it is dispatched again)."""
    if job.status not in ("queued", "running"):
        return False
    at = job.updated_at
    if at.tzinfo is None:                      # SQLite hands back naive UTC datetimes
        at = at.replace(tzinfo=timezone.utc)
    return utcnow() - at > timedelta(seconds=older_than_s)
