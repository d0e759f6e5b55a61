"""Compile jobs (models.CompileJob): the one place that reads and writes them. Callers own the transaction.

A job recorded by the API is queued in the outbox (services.store.jobs sends it, with attempts and heartbeats,
like plans and evaluations); a plan's compile stage runs its own jobs inside the plan's task."""
from __future__ import annotations

import dataclasses
import hashlib

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from . import job_metrics
from .db import insert_new
from .models import CompileJob, utcnow

__all__ = ["job_id", "get", "record", "request", "start", "finish", "fail", "finished_count"]


def job_id(plan_id: str, collective: str, options: str) -> str:
    """The job's id: the sha256 of what it compiles (the same request is the same job)."""
    return hashlib.sha256(f"{plan_id}|{collective}|{options}".encode()).hexdigest()


def get(s: Session, plan_id: str, collective: str, options: str) -> CompileJob | None:
    return s.get(CompileJob, job_id(plan_id, collective, options))


def record(s: Session, plan_id: str, collective: str, options: str, spec: dict,
           owner: str | None = None) -> tuple[CompileJob, bool]:
    """(job, created): the existing job, or a new queued one owned by `owner` (a concurrent request may have
    created it)."""
    job = get(s, plan_id, collective, options)
    if job is not None:
        return job, False
    created = insert_new(s, CompileJob, id=job_id(plan_id, collective, options), plan_id=plan_id,
                         collective=collective, options=options, spec=spec, status="queued", stage="queued",
                         attempts=0, owner=owner)
    return get(s, plan_id, collective, options), created


def request(s: Session, plan_id: str, collective: str, options, prefix: str = "",
            owner: str | None = None) -> tuple[CompileJob, bool]:
    """(job, created) of one schedule compiled for `options` (services.compiler.api.CompileOptions: its key
    and its fields are the job's spec): `record` of `prefix + collective`, where `prefix` names a plan
    revision's schedules (`rev{n}:`) and is kept in the spec; `owner`: the API key asking (jobs.owner_name)."""
    return record(s, plan_id, prefix + collective, options.key(), {**dataclasses.asdict(options), "prefix": prefix},
                  owner=owner)


def start(s: Session, job: CompileJob) -> None:
    job.status, job.stage, job.updated_at = "running", "compile", utcnow()


def finish(s: Session, job: CompileJob, digest: str, meta: dict) -> None:
    job.status, job.stage, job.digest, job.meta, job.reason, job.updated_at = "done", "done", digest, meta, None, utcnow()
    _ended(s, job)


def fail(s: Session, job: CompileJob, reason: str, meta: dict | None = None) -> None:
    job.status, job.reason, job.meta, job.updated_at = "failed", reason, meta, utcnow()
    _ended(s, job)


def _ended(s: Session, job: CompileJob) -> None:
    """The job's duration and, when the compile timed itself (`seconds` in its meta), the compile's."""
    job_metrics.job_ended(s, "compile", job.status, job.created_at, job.updated_at)
    meta = job.meta or {}
    if isinstance(meta.get("seconds"), (int, float)):
        runtime = meta.get("runtime") or (job.spec or {}).get("runtime") or "unknown"
        job_metrics.observe(s, "fabricplan_compile_duration_seconds", (str(runtime), job.status), meta["seconds"])


def finished_count(s: Session, plan_id: str, prefix: str = "") -> int:
    """Compile jobs of the plan's schedules (a revision's: `prefix` rev{n}:) that are done or failed."""
    q = select(func.count()).select_from(CompileJob).where(CompileJob.plan_id == plan_id,
                                                          CompileJob.status.in_(("done", "failed")))
    q = q.where(CompileJob.collective.like(f"{prefix}%")) if prefix else q.where(~CompileJob.collective.like("rev%"))
    return int(s.scalar(q) or 0)
