"""The life of a job (a plan, an evaluation, a plan revision or an on-demand compile) as rows: the outbox,
delivery attempts, heartbeats.

The row is the source of truth. A request only inserts a `queued` row; the dispatcher (services.api.dispatch)
hands queued rows that were not yet sent to the workers (`undispatched` -> `begin_dispatch` -> send ->
`mark_dispatched`), so a broker outage delays a job but never loses it. Every delivery has an attempt number;
a worker writes only while the row is not finished and still carries its attempt (`claim`, a guarded UPDATE
that also holds the row until the transaction ends), so a redelivered or superseded task never writes to a
finished or failed job. A running task refreshes `heartbeat_at` (`beat`); a running job whose heartbeat is
older than the lost-worker limit is redelivered with the next attempt, or failed once the attempts are used
(`lost`). A job sent but still `queued` after the resend delay was lost on its way (a broker restarted
without its messages): `undispatched` lists it again and it is sent with a new attempt number, so the first
message, should it still arrive, stops at its first write. The embedded service knows which jobs its worker
still holds (`held`): a job sent, unfinished and no longer held ended without its outcome recorded (the
database refused the job's writes, e.g. a full disk). A queued one is sent again with the same backoff, a
running one is lost at once; both only once the database takes writes again.

Worker time is a budget: a job queued by the API carries its `owner`, the API key that asked for it
(`owner_name`: role and key id). The API bounds each owner's unfinished jobs (`unfinished_by`, counted under
`lock_owner`, so one owner's requests count and insert one at a time), and the
dispatcher keeps viewers' jobs to a few worker slots (`in_flight_by`), so a viewer flooding downloads never
holds every worker while a scheduler's plan waits.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from .db import write_lock
from .models import CompileJob, Evaluation, Plan, PlanEvent, PlanRevision, utcnow

__all__ = ["KINDS", "TERMINAL", "UNFINISHED", "VIEWER", "undispatched", "begin_dispatch", "undo_dispatch",
           "mark_dispatched", "claim", "beat", "lost", "requeue_all", "owner_name", "owners", "owner_lock_key",
           "lock_owner", "unfinished_by", "in_flight_by", "counts"]

KINDS = {"plan": Plan, "evaluation": Evaluation, "revision": PlanRevision, "compile": CompileJob}
TERMINAL = ("done", "failed")
UNFINISHED = ("queued", "running")
VIEWER = "viewer:"                      # owner_name prefix of jobs a viewer key queued


def _waiting(model, resend_after_s: float | None):
    """Queued and not sent, or (with `resend_after_s`) sent that long ago and never started."""
    unsent = model.dispatched_at.is_(None)
    if resend_after_s is None:
        return (model.status == "queued") & unsent
    cutoff = datetime.now(timezone.utc) - timedelta(seconds=resend_after_s)
    return (model.status == "queued") & (unsent | (model.dispatched_at < cutoff))


def undispatched(s: Session, limit: int = 100, resend_after_s: float | None = None,
                 held: set[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """(kind, id) of queued jobs not yet handed to a worker (and, with `resend_after_s`, of jobs handed
    over and never started: after resend_after_s, then twice that after the next send, and so on up to 64
    times, so a long queue in front of busy workers is not flooded with copies), oldest first. `held`: the
    jobs a worker still holds (the embedded one), never sent again."""
    held = held or set()
    out = []
    now = datetime.now(timezone.utc)
    for kind, model in KINDS.items():
        q = (select(model.id, model.dispatched_at, model.attempts).where(_waiting(model, resend_after_s))
             .order_by(model.created_at).limit(limit))
        for job_id, sent, attempts in s.execute(q):
            if (kind, job_id) in held:
                continue
            if sent is not None:
                sent = sent if sent.tzinfo else sent.replace(tzinfo=timezone.utc)     # SQLite keeps no zone
                if (now - sent).total_seconds() < resend_after_s * 2 ** min(max(attempts - 1, 0), 6):
                    continue
            out.append((kind, job_id))
    return out


def begin_dispatch(s: Session, kind: str, job_id: str, resend_after_s: float | None = None) -> int | None:
    """The attempt number of a new delivery (None if the job is no longer waiting to be sent). A resend
    clears the earlier send, so the delivery is recorded by `mark_dispatched` like a first one."""
    model = KINDS[kind]
    res = s.execute(update(model).where(model.id == job_id, _waiting(model, resend_after_s))
                    .values(attempts=model.attempts + 1, dispatched_at=None))
    return s.scalar(select(model.attempts).where(model.id == job_id)) if res.rowcount else None


def undo_dispatch(s: Session, kind: str, job_id: str, attempt: int) -> None:
    """The send of `attempt` failed: it never happened (the job stays in the outbox)."""
    model = KINDS[kind]
    s.execute(update(model).where(model.id == job_id, model.attempts == attempt, model.dispatched_at.is_(None))
              .values(attempts=model.attempts - 1))


def mark_dispatched(s: Session, kind: str, job_id: str, attempt: int) -> None:
    model = KINDS[kind]
    s.execute(update(model).where(model.id == job_id, model.attempts == attempt, model.dispatched_at.is_(None))
              .values(dispatched_at=utcnow()))


def claim(s: Session, kind: str, job_id: str, attempt: int | None) -> bool:
    """True when this attempt may write: the job is not finished and carries `attempt` (any attempt when
    None: a direct call outside a worker). The UPDATE holds the row until the transaction ends."""
    model = KINDS[kind]
    q = update(model).where(model.id == job_id, model.status.not_in(TERMINAL))
    if attempt is not None:
        q = q.where(model.attempts == attempt)
    return bool(s.execute(q.values(heartbeat_at=utcnow())).rowcount)


def beat(s: Session, kind: str, job_id: str, attempt: int | None) -> bool:
    """Refresh the heartbeat of a running job (False once it finished or another attempt took over)."""
    model = KINDS[kind]
    q = update(model).where(model.id == job_id, model.status == "running")
    if attempt is not None:
        q = q.where(model.attempts == attempt)
    return bool(s.execute(q.values(heartbeat_at=utcnow())).rowcount)


def lost(s: Session, older_than_s: float, max_attempts: int,
         held: set[tuple[str, str]] | None = None) -> list[tuple[str, str, str | None]]:
    """Running jobs without a heartbeat for `older_than_s`: their worker died. Each is put back in the outbox
    for its next attempt, or - attempts used up - returned with the reason to fail it with (the caller fails
    it: a plan also releases its fabric). With `held` (the embedded worker's jobs, read before this), a
    running job the dispatcher sent that the worker no longer holds is lost whatever its heartbeat (not one
    a job runs in its own process, e.g. a plan's compile jobs: never sent, they have no dispatched_at). Returns (kind, id, reason or None when
    redelivered)."""
    cutoff = datetime.now(timezone.utc) - timedelta(seconds=older_than_s)
    out = []
    for kind, model in KINDS.items():
        rows = list(s.scalars(select(model).where(model.status == "running", model.heartbeat_at < cutoff)))
        if held is not None:
            seen = {job.id for job in rows}
            rows += [job for job in s.scalars(select(model).where(model.status == "running",
                                                                 model.dispatched_at.is_not(None)))
                     if job.id not in seen and (kind, job.id) not in held]
        for job in rows:
            if held is not None and (kind, job.id) not in held and job.dispatched_at is not None \
                    and job.heartbeat_at is not None and _aware(job.heartbeat_at) >= cutoff:
                what = f"the worker process running stage '{job.stage}' ended without recording an outcome"
            else:
                what = f"the worker running stage '{job.stage}' sent no heartbeat for more than " \
                       f"{int(older_than_s)} s (worker lost)"
            if job.attempts < max_attempts:
                res = s.execute(update(model).where(model.id == job.id, model.status == "running",
                                                    model.attempts == job.attempts)
                                .values(status="queued", dispatched_at=None, updated_at=utcnow()))
                if res.rowcount and kind == "plan":
                    s.add(PlanEvent(plan_id=job.id, status="queued", stage=job.stage, progress=job.progress,
                                    message=f"{what}; delivered again (attempt {job.attempts + 1} of {max_attempts})"))
                if res.rowcount:
                    out.append((kind, job.id, None))
            else:
                out.append((kind, job.id, f"{what} on each of {job.attempts} attempts; submit it again or check "
                                          "the workers"))
    return out


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)        # SQLite keeps no zone


def requeue_all(s: Session) -> int:
    """Every unfinished job back to the outbox (an embedded service starting: its previous process, and the
    worker processes it ran, are gone). Returns how many."""
    n = 0
    for model in KINDS.values():
        n += s.execute(update(model).where(model.status.not_in(TERMINAL))
                       .values(status="queued", dispatched_at=None)).rowcount
    return n


def owner_name(role: str, key_id: str | None) -> str:
    """What a job's `owner` says: the role and the id of the key that queued it ("scheduler:anonymous"
    without keys)."""
    return f"{role}:{key_id or 'anonymous'}"


def owners(s: Session, pending: list[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """(kind, id) -> owner of each pending job."""
    out: dict[tuple[str, str], str | None] = {}
    for kind, model in KINDS.items():
        ids = [job_id for k, job_id in pending if k == kind]
        if ids:
            out.update({(kind, job_id): owner for job_id, owner in
                        s.execute(select(model.id, model.owner).where(model.id.in_(ids)))})
    return out


def owner_lock_key(owner: str) -> int:
    """The owner's PostgreSQL advisory lock key: a signed 64-bit integer from the name's BLAKE2b digest, the
    same in every process (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(owner.encode(), digest_size=8).digest(), "big", signed=True)


def lock_owner(s: Session, owner: str) -> None:
    """Serialise this transaction with every other one that counts or queues `owner`'s jobs, until it commits
    or rolls back. PostgreSQL: the transaction-scoped advisory lock of the owner (`pg_advisory_xact_lock`;
    other owners, fabric locks and workers never wait on it; waited for at most the connection's lock_timeout,
    services.store.db.LOCK_TIMEOUT_S). SQLite: the database write lock (services.store.db.write_lock), the
    only lock it has."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": owner_lock_key(owner)})
    else:
        write_lock(s)


def unfinished_by(s: Session, owner: str) -> int:
    """Jobs of every kind `owner` queued that are not finished (queued or running)."""
    return sum(s.scalar(select(func.count()).select_from(model)
                        .where(model.owner == owner, model.status.in_(UNFINISHED))) for model in KINDS.values())


def in_flight_by(s: Session, prefix: str) -> int:
    """Jobs whose owner starts with `prefix` that a worker has: running, or sent and not started yet."""
    return sum(s.scalar(select(func.count()).select_from(model).where(
        model.owner.startswith(prefix, autoescape=True),
        (model.status == "running") | ((model.status == "queued") & model.dispatched_at.is_not(None))))
        for model in KINDS.values())


def counts(s: Session) -> dict[str, dict[str, int]]:
    """kind -> {queued, running}: unfinished jobs of every kind (plans, evaluations, revisions, compiles)."""
    out = {kind: dict.fromkeys(UNFINISHED, 0) for kind in KINDS}
    for kind, model in KINDS.items():
        out[kind].update({st: n for st, n in s.execute(select(model.status, func.count())
                                                       .where(model.status.in_(UNFINISHED)).group_by(model.status))})
    return out
