"""Worker time is a budget: every API key has a bound on its unfinished jobs.

A request that queues work - a plan, an evaluation, an on-demand compile, a failure revision - records the
key that asked as the job's owner (services.store.jobs.owner_name) and, in the same transaction, counts the
owner's unfinished jobs of every kind. Beyond `max_jobs_per_key` (a viewer key: `viewer_max_jobs`) the answer
is 429 with Retry-After and nothing is stored. A request answered from the store (the same evaluation,
compile options or Idempotency-Key again) queues nothing and is never refused; a failure report is checked
before it is recorded, so at the bound even one naming only links failed already gets 429. Concurrent
requests of one key never pass the bound together: each counts under the owner's lock
(services.store.jobs.lock_owner: PostgreSQL's transaction-scoped advisory lock of the owner, SQLite's database
write lock), held until its transaction commits or rolls back, so one owner's count-then-insert never
interleave (tests/api/test_budget.py races 12 requests against a bound of 3 on both backends).

Viewers have a small quota rather than none: the dashboard (a viewer key is enough for it) evaluates the
topologies it draws and downloads XML for options not compiled yet; two jobs at a time keep that working
while the dispatcher keeps all viewers' jobs to `viewer_job_slots` workers (services.api.dispatch).
"""
from __future__ import annotations

from fastapi import HTTPException
from sqlalchemy.orm import Session

from services.config import Settings
from services.store import jobs

from .auth import Principal

__all__ = ["RETRY_AFTER_S", "owner", "bound", "admit", "room"]

RETRY_AFTER_S = 10


def owner(p: Principal) -> str:
    return jobs.owner_name(p.role, p.key_id)


def bound(p: Principal, settings: Settings) -> int:
    return settings.viewer_max_jobs if p.role == "viewer" else settings.max_jobs_per_key


def _too_many(p: Principal, limit: int, held: int) -> HTTPException:
    who = "a viewer key" if p.role == "viewer" else "an API key"
    return HTTPException(429, f"{who} may have at most {limit} unfinished jobs (plans, evaluations, compiles, "
                              f"revisions); this one has {held}: retry once some finish",
                         headers={"Retry-After": str(RETRY_AFTER_S)})


def admit(s: Session, job, p: Principal, settings: Settings) -> None:
    """Record `p` as the owner of the new `job` (flushed in `s`); roll back and raise 429 when the key then
    has more unfinished jobs than its bound (plans and evaluations: their rows are added without a savepoint,
    so the rollback removes them on every backend). The count runs under the owner's lock, taken before the
    owner is written: on PostgreSQL (READ COMMITTED) it sees every job of the owner committed by a request
    that held the lock before, and no other request of the owner commits a job until this one ends; on
    SQLite the job's insert already holds the database's write lock."""
    job.owner = owner(p)
    jobs.lock_owner(s, job.owner)
    s.flush()
    limit = bound(p, settings)
    held = jobs.unfinished_by(s, job.owner)
    if held > limit:
        s.rollback()
        raise _too_many(p, limit, held - 1)


def room(s: Session, p: Principal, settings: Settings) -> str:
    """Before a job is recorded (compiles and revisions, whose rows are inserted under a savepoint): 429 when
    the key already has its bound of unfinished jobs; else the owner to record on the new job. The count runs
    under the owner's lock (services.store.jobs.lock_owner), which the caller's transaction holds until it
    commits the job, so no other request of the owner counts in between."""
    who, limit = owner(p), bound(p, settings)
    jobs.lock_owner(s, who)
    held = jobs.unfinished_by(s, who)
    if held >= limit:
        raise _too_many(p, limit, held)
    return who
