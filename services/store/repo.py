"""Repositories: the only code that reads or writes rows. Every function takes a Session; callers own the
transaction (services.store.db.session_scope), so a failure leaves nothing half-written."""
from __future__ import annotations

import hashlib
import json
import zlib
from typing import Callable

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from . import job_metrics, stage_events
from .db import insert_new
from .models import ApiKey, Artifact, Frontier, Plan, PlanArtifact, PlanBinding, PlanEvent, utcnow

TERMINAL = ("done", "failed")
PLAN_STATUSES = ("queued", "running", "done", "failed")


class Conflict(Exception):
    """An Idempotency-Key reused with a different request body."""


def request_hash(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ----- plans ----------------------------------------------------------------------------------------
def scoped_key(scope: str | None, idempotency_key: str | None) -> str | None:
    """What is stored for an Idempotency-Key sent by `scope` (the API key that sent it, jobs.owner_name): the
    SHA-256 of both, so two API keys' equal Idempotency-Keys never name the same plan (one scheduler's replay
    never gets another's plan). None scope: the key as sent (direct calls)."""
    if not idempotency_key or scope is None:
        return idempotency_key
    return hashlib.sha256(f"{scope}\n{idempotency_key}".encode()).hexdigest()


def create_plan(s: Session, body: dict, idempotency_key: str | None, scope: str | None = None,
                normalise: Callable[[dict], dict] | None = None) -> tuple[Plan, bool]:
    """(plan, created). Same key (of the same `scope`: scoped_key) and body -> the existing plan; same key,
    other body -> Conflict. `normalise(stored request)`: the stored request as today's schema writes it (a
    field added since with its default), so a replay of a plan accepted before an upgrade is still the same
    request; a stored request the schema no longer accepts is a different one."""
    h = request_hash(body)

    def same(existing: Plan) -> bool:
        if existing.request_hash == h:
            return True
        if normalise is None:
            return False
        try:
            return request_hash(normalise(existing.request)) == h
        except ValueError:                 # pydantic's ValidationError is a ValueError
            return False

    shown, idempotency_key = idempotency_key, scoped_key(scope, idempotency_key)
    if idempotency_key:
        existing = s.scalar(select(Plan).where(Plan.idempotency_key == idempotency_key))
        if existing is not None:
            if not same(existing):
                raise Conflict(f"Idempotency-Key {shown!r} was used for a different request")
            return existing, False
    plan = Plan(job_id=body["job_id"], idempotency_key=idempotency_key, request_hash=h, request=body,
                status="queued", stage="queued", progress=0.0)
    s.add(plan)
    s.add(PlanEvent(plan=plan, status="queued", stage="queued", progress=0.0, message="accepted"))
    try:
        s.flush()
    except IntegrityError:                 # a concurrent request with the same key won the race
        s.rollback()
        existing = s.scalar(select(Plan).where(Plan.idempotency_key == idempotency_key))
        if existing is None or not same(existing):
            raise Conflict(f"Idempotency-Key {shown!r} was used for a different request") from None
        return existing, False
    return plan, True


def get_plan(s: Session, plan_id: str) -> Plan | None:
    return s.get(Plan, plan_id)


def _plan_filters(job_id: str | None = None, status: list[str] | None = None, fabric_id: str | None = None,
                  nodes: int | None = None, degree: int | None = None) -> list:
    where = []
    if job_id:
        where.append(Plan.job_id == job_id)
    if status:
        where.append(Plan.status.in_(status))
    if fabric_id:
        where.append(Plan.id.in_(select(PlanBinding.plan_id).where(PlanBinding.fabric_id == fabric_id)))
    if nodes is not None:
        where.append(Plan.request["nodes"].as_integer() == nodes)
    if degree is not None:
        where.append(Plan.request["degree"].as_integer() == degree)
    return where


def list_plans(s: Session, job_id: str | None = None, limit: int = 100, *, offset: int = 0,
               status: list[str] | None = None, fabric_id: str | None = None, nodes: int | None = None,
               degree: int | None = None) -> list[Plan]:
    """Newest first; filters combine with AND (`fabric_id`: plans bound to that fabric, released or not)."""
    q = (select(Plan).where(*_plan_filters(job_id, status, fabric_id, nodes, degree))
         .order_by(Plan.created_at.desc(), Plan.id).limit(limit).offset(offset).options(selectinload(Plan.binding)))
    return list(s.scalars(q))


def count_plans(s: Session, job_id: str | None = None, *, status: list[str] | None = None,
                fabric_id: str | None = None, nodes: int | None = None, degree: int | None = None) -> int:
    """How many plans list_plans would return without limit and offset."""
    return s.scalar(select(func.count()).select_from(Plan)
                    .where(*_plan_filters(job_id, status, fabric_id, nodes, degree)))


def plans_by_status(s: Session) -> dict[str, int]:
    """Plan counts per status (every status present, zeros included)."""
    counts = dict.fromkeys(PLAN_STATUSES, 0)
    counts.update({st: n for st, n in s.execute(select(Plan.status, func.count()).group_by(Plan.status))})
    return counts


def _guard(q, attempt: int | None):
    return q if attempt is None else q.where(Plan.attempts == attempt)


def advance(s: Session, plan_id: str, *, status: str = "running", stage: str, progress: float,
            message: str | None = None, attempt: int | None = None) -> bool:
    """Move a non-terminal plan (of this attempt, when given) to (status, stage, progress) and record the
    event; False if it is already terminal or another attempt took over (a redelivered task must not
    resurrect a finished plan)."""
    now = utcnow()
    previous = s.scalar(select(Plan.stage).where(Plan.id == plan_id))
    res = s.execute(_guard(update(Plan).where(Plan.id == plan_id, Plan.status.not_in(TERMINAL)), attempt)
                    .values(status=status, stage=stage, progress=progress, heartbeat_at=now, updated_at=now))
    if res.rowcount == 0:
        return False
    stage_events.record(s, plan_id, previous, stage, status=status, progress=progress, message=message, now=now)
    return True


def finish(s: Session, plan_id: str, result: dict, attempt: int | None = None) -> bool:
    """done, atomically with the result."""
    now = utcnow()
    previous = s.scalar(select(Plan.stage).where(Plan.id == plan_id))
    res = s.execute(_guard(update(Plan).where(Plan.id == plan_id, Plan.status.not_in(TERMINAL)), attempt)
                    .values(status="done", stage="done", progress=1.0, result=result, reason=None,
                            updated_at=now, heartbeat_at=now))
    if res.rowcount:
        stage_events.close_stage(s, plan_id, previous, status="done", progress=1.0, now=now)
        s.add(PlanEvent(plan_id=plan_id, status="done", stage="done", progress=1.0, message="plan complete", at=now))
        job_metrics.job_ended(s, "plan", "done", s.scalar(select(Plan.created_at).where(Plan.id == plan_id)), now)
    return bool(res.rowcount)


def fail(s: Session, plan_id: str, reason: str, stage: str | None = None, attempt: int | None = None) -> bool:
    """failed with the reason (only a non-terminal plan of this attempt, when given)."""
    now = utcnow()
    plan = s.get(Plan, plan_id)
    if plan is None or plan.status in TERMINAL or (attempt is not None and plan.attempts != attempt):
        return False
    res = s.execute(_guard(update(Plan).where(Plan.id == plan_id, Plan.status.not_in(TERMINAL)), attempt)
                    .values(status="failed", reason=reason, updated_at=now, stage=stage or plan.stage))
    if not res.rowcount:
        return False
    closed = stage_events.close_stage(s, plan_id, stage or plan.stage, status="failed", progress=plan.progress,
                                      now=now, message=reason)
    job_metrics.job_ended(s, "plan", "failed", plan.created_at, now)
    if closed is None:      # the event closing the stage it failed in carries the reason
        s.add(PlanEvent(plan_id=plan_id, status="failed", stage=stage or plan.stage, progress=plan.progress,
                        message=reason))
    s.expire(plan)
    return True


# ----- artifacts ----------------------------------------------------------------------------------
def put_blob(s: Session, data: bytes, kind: str, media_type: str, *, compress: bool = True) -> str:
    """Store bytes content-addressed (zlib-compressed unless already compressed); returns the digest. Blobs
    above 4 MiB (compiled XML at hundreds of ranks) are compressed at level 1: measured on a 15.6 MB MSCCL
    file, 0.04 s instead of 0.16 s at level 6, and 1.0 MB instead of 0.66 MB."""
    stored = zlib.compress(data, 1 if len(data) > (4 << 20) else 6) if compress else data
    digest = hashlib.sha256(stored).hexdigest()
    if not blob_exists(s, digest):      # content-addressed: a concurrent job storing the same bytes is no error
        insert_new(s, Artifact, digest=digest, kind=kind, media_type=media_type + ("+zlib" if compress else ""),
                   size=len(stored), data=stored, created_at=utcnow())
    return digest


def get_blob(s: Session, digest: str) -> tuple[bytes, Artifact] | None:
    a = s.get(Artifact, digest)
    if a is None:
        return None
    data = zlib.decompress(a.data) if a.media_type.endswith("+zlib") else a.data
    return data, a


def blob_size(s: Session, digest: str) -> int:
    """A blob's stored size in bytes (0 when absent), without loading it."""
    return s.execute(select(Artifact.size).where(Artifact.digest == digest)).scalar() or 0


def blob_exists(s: Session, digest: str) -> bool:
    """Whether a blob is stored, without loading it."""
    return s.execute(select(Artifact.digest).where(Artifact.digest == digest)).first() is not None


def read_stored(s: Session, digest: str) -> tuple[bytes, str] | None:
    """A blob as stored (zlib-compressed when its media type ends in "+zlib") and that media type."""
    row = s.execute(select(Artifact.data, Artifact.media_type).where(Artifact.digest == digest)).first()
    return None if row is None else (row[0], row[1])


def iter_blob(stored: bytes, media_type: str, chunk: int = 1 << 20):
    """The content of a stored blob in pieces of about `chunk` bytes, decompressed as it goes: a large file
    is never held whole in memory beside its compressed form."""
    if not media_type.endswith("+zlib"):
        for i in range(0, len(stored), chunk):
            yield stored[i:i + chunk]
        return
    z = zlib.decompressobj()
    view = memoryview(stored)
    for i in range(0, len(stored), chunk // 8):
        piece = z.decompress(view[i:i + chunk // 8])
        if piece:
            yield piece
    tail = z.flush()
    if tail:
        yield tail


def attach(s: Session, plan_id: str, name: str, digest: str, meta: dict | None = None) -> None:
    link = s.get(PlanArtifact, (plan_id, name))
    if link is None:
        s.add(PlanArtifact(plan_id=plan_id, name=name, digest=digest, meta=meta))
    else:
        link.digest, link.meta = digest, meta


def plan_artifact(s: Session, plan_id: str, name: str) -> PlanArtifact | None:
    return s.get(PlanArtifact, (plan_id, name))


# ----- frontier cache -----------------------------------------------------------------------------
def cached_frontier(s: Session, nodes: int, degree: int, options: str) -> Frontier | None:
    return s.scalar(select(Frontier).where(Frontier.nodes == nodes, Frontier.degree == degree,
                                           Frontier.options == options))


def store_frontier(s: Session, nodes: int, degree: int, options: str, entries: list, seconds: float) -> None:
    if cached_frontier(s, nodes, degree, options) is None:     # another worker may cache it first: same content
        insert_new(s, Frontier, nodes=nodes, degree=degree, options=options, entries=entries, seconds=seconds)


# ----- api keys -------------------------------------------------------------------------------------
def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def find_key(s: Session, secret: str) -> ApiKey | None:
    return s.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(secret), ApiKey.revoked.is_(False)))
