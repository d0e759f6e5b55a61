"""The life of a job (a plan, an evaluation, a plan revision or an on-demand compile) as rows: the outbox,
delivery attempts, heartbeats.

The row is the source of truth. A request only inserts a `queued` row; the dispatcher (services.api.dispatch)
hands queued rows that were not yet sent to the workers (`undispatched` -> `begin_dispatch` -> send ->
`mark_dispatched`), so a broker outage delays a job but never loses it. Every delivery has an attempt number;
a worker writes only while the row is not finished and still carries its attempt (`claim`, a guarded UPDATE
that also holds the row until the transaction ends), so a redelivered or superseded task never writes to a
finished or failed job.

Liveness is the worker's, not the job's. Every worker process beats its own row in `workers` (`beat_worker`);
a task that starts takes its job (`take`: `holder` names its worker) and gives it back when it ends (`release`:
`holder` NULL, the job's next task handed to the broker at `dispatched_at`). A running job is lost only when
its holder stopped beating for the lost-worker limit (`lost`): it is redelivered with the next attempt and
one more loss, or failed once `max_attempts` workers were lost while holding it. A job whose next task waits
in the queue has no holder and is never lost, however long the queue; a job whose task retries a database
or broker fault is held by a worker that is alive. Neither fault ever fails a job: they delay it. A job sent but still `queued` after the resend delay was lost on its way (a broker restarted
without its messages): `undispatched` lists it again and it is sent with a new attempt number, so the first
message, should it still arrive, stops at its first write; so is a running job released between two tasks
whose next task no worker took within the same delay (the broker lost that message), a delivery that counts
no loss. The embedded service knows which jobs its worker
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
import os
import secrets
import socket
from datetime import datetime, timedelta, timezone

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.orm import Session

from . import stage_events
from .db import insert_new, write_lock
from .models import CompileJob, Evaluation, Plan, PlanEvent, PlanRevision, Worker, utcnow

__all__ = ["KINDS", "TERMINAL", "UNFINISHED", "VIEWER", "undispatched", "begin_dispatch", "undo_dispatch",
           "mark_dispatched", "claim", "beat", "take", "release", "worker_id", "beat_worker", "workers_alive",
           "lost", "lose", "requeue", "requeue_all", "owner_name", "owners", "owner_lock_key", "lock_owner",
           "unfinished_by", "in_flight_by", "counts"]

KINDS = {"plan": Plan, "evaluation": Evaluation, "revision": PlanRevision, "compile": CompileJob}
TERMINAL = ("done", "failed")
UNFINISHED = ("queued", "running")
VIEWER = "viewer:"                      # owner_name prefix of jobs a viewer key queued


def _waiting(model, resend_after_s: float | None):
    """Queued and not sent, or (with `resend_after_s`) sent that long ago and not taken by any worker: queued,
    or running and released between two tasks (no holder)."""
    unsent = model.dispatched_at.is_(None)
    if resend_after_s is None:
        return (model.status == "queued") & unsent
    cutoff = datetime.now(timezone.utc) - timedelta(seconds=resend_after_s)
    untaken = model.holder.is_(None) & (model.dispatched_at < cutoff)
    return ((model.status == "queued") & (unsent | untaken)) | ((model.status == "running") & untaken)


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
                    .values(attempts=model.attempts + 1, dispatched_at=None, status="queued"))
    return s.scalar(select(model.attempts).where(model.id == job_id)) if res.rowcount else None


def undo_dispatch(s: Session, kind: str, job_id: str, attempt: int) -> None:
    """The send of `attempt` failed: it never happened (the job stays in the outbox)."""
    model = KINDS[kind]
    s.execute(update(model).where(model.id == job_id, model.attempts == attempt, model.dispatched_at.is_(None))
              .values(attempts=model.attempts - 1))


def mark_dispatched(s: Session, kind: str, job_id: str, attempt: int, holder: str | None = None) -> None:
    """`attempt` was handed to a worker. `holder`: the embedded worker's process that now runs it (an API
    process of `serve --workers N`), so the other processes neither send it again (`undispatched`) nor count it
    lost (`lost`) while that process is alive; Celery workers take their jobs themselves (`take`)."""
    model = KINDS[kind]
    values = {"dispatched_at": utcnow(), **({"holder": holder} if holder is not None else {})}
    s.execute(update(model).where(model.id == job_id, model.attempts == attempt, model.dispatched_at.is_(None))
              .values(**values))


def claim(s: Session, kind: str, job_id: str, attempt: int | None) -> bool:
    """True when this attempt may write: the job is not finished and carries `attempt` (any attempt when
    None: a direct call outside a worker). The UPDATE holds the row until the transaction ends."""
    model = KINDS[kind]
    q = update(model).where(model.id == job_id, model.status.not_in(TERMINAL))
    if attempt is not None:
        q = q.where(model.attempts == attempt)
    return bool(s.execute(q.values(heartbeat_at=utcnow())).rowcount)


def beat(s: Session, kind: str, job_id: str, attempt: int | None, holder: str | None = None) -> bool:
    """Refresh the heartbeat of a running job (False once it finished or another attempt took over). With
    `holder`, a job no worker holds is held by it again (one task of a group ended while this one runs)."""
    model = KINDS[kind]
    q = update(model).where(model.id == job_id, model.status == "running")
    if attempt is not None:
        q = q.where(model.attempts == attempt)
    values = {"heartbeat_at": utcnow()}
    if holder is not None:
        values["holder"] = func.coalesce(model.holder, holder)
    return bool(s.execute(q.values(**values)).rowcount)


_identity: tuple[int, str] | None = None


def worker_id() -> str:
    """This process's worker identity (host, pid and a random tag: a pid reused later is another worker);
    a new one in a forked child."""
    global _identity
    if _identity is None or _identity[0] != os.getpid():
        _identity = (os.getpid(), f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(4)}")
    return _identity[1]


def embedded_worker_id() -> str:
    """The embedded worker of this API process (`serve`, `serve --workers N`): its row in `workers` and the
    holder of every job it runs, also while a job process of its own runs the job (`hold_as`)."""
    return "api:" + worker_id()


def hold_as(worker: str) -> None:
    """This process takes and beats jobs as `worker` (an embedded job process: as its API process's worker,
    which supervises it and whose row beats)."""
    global _identity
    _identity = (os.getpid(), worker)


def take(s: Session, kind: str, job_id: str, attempt: int | None, holder: str) -> bool:
    """A task of the job's `attempt` starts in worker `holder`: the job is held by it (False: the job is
    finished or another attempt took over)."""
    model = KINDS[kind]
    q = update(model).where(model.id == job_id, model.status.not_in(TERMINAL))
    if attempt is not None:
        q = q.where(model.attempts == attempt)
    return bool(s.execute(q.values(holder=holder, heartbeat_at=utcnow())).rowcount)


def release(s: Session, kind: str, job_id: str, attempt: int | None, holder: str) -> bool:
    """The task that `holder` ran ended: the job waits for its next task (handed to the broker now), held by
    nobody. Only while `holder` holds it (another task of the job may have taken it since)."""
    model = KINDS[kind]
    q = update(model).where(model.id == job_id, model.holder == holder)
    if attempt is not None:
        q = q.where(model.attempts == attempt)
    return bool(s.execute(q.values(holder=None, dispatched_at=utcnow())).rowcount)


def beat_worker(s: Session, worker: str, kind: str = "celery") -> None:
    """The worker process `worker` is alive (its row, inserted at its first beat)."""
    now = utcnow()
    if not s.execute(update(Worker).where(Worker.id == worker).values(heartbeat_at=now)).rowcount:
        insert_new(s, Worker, id=worker, kind=kind, started_at=now, heartbeat_at=now)


def workers_alive(s: Session, within_s: float, kind: str | None = None) -> int:
    """Worker processes that beat within the last `within_s` seconds (of `kind`, when given)."""
    cutoff = datetime.now(timezone.utc) - timedelta(seconds=within_s)
    q = select(func.count()).select_from(Worker).where(Worker.heartbeat_at >= cutoff)
    return s.scalar(q if kind is None else q.where(Worker.kind == kind))


def lost(s: Session, older_than_s: float, max_attempts: int,
         held: set[tuple[str, str]] | None = None, me: str | None = None) -> list[tuple[str, str, str | None]]:
    """Running jobs whose worker is gone. Scaled (`held` None): the job's holder sent no heartbeat (of its own
    row in `workers`, nor of the job) for `older_than_s`; a job nobody holds waits for its next task and is
    not lost (the resend of `undispatched` finds a lost message), except one never sent that runs inside
    another job (a plan's compile jobs) whose heartbeat stopped. Embedded (`held`: the embedded worker's
    jobs, read before this): the worker supervises its job processes, so a job it holds is never lost however
    late its heartbeat (a database busy with other writers); one it no longer holds is lost at once if the
    dispatcher sent it, else once its heartbeat is older than `older_than_s`. `me`: this process's worker id;
    a job held by another embedded process (`serve --workers N`) is that process's to supervise while its
    worker row beats (each process sees only its own worker's jobs in `held`).

    Each lost job counts one loss (`lose`): put back in the outbox for its next attempt, or - `max_attempts`
    losses - returned with the reason to fail it with (the caller fails it: a plan also releases its
    fabric). Returns (kind, id, reason or None when redelivered)."""
    cutoff = datetime.now(timezone.utc) - timedelta(seconds=older_than_s)
    alive = select(Worker.id).where(Worker.heartbeat_at >= cutoff)
    out = []
    for kind, model in KINDS.items():
        running, stale = model.status == "running", model.heartbeat_at < cutoff
        if held is None:
            gone = model.holder.is_not(None) & model.holder.not_in(alive)
            inside = model.holder.is_(None) & model.dispatched_at.is_(None)
            rows = list(s.scalars(select(model).where(running, stale, gone | inside)))
        else:
            others = model.holder.is_not(None) & (model.holder != me) & model.holder.in_(alive)
            rows = [job for job in s.scalars(select(model).where(running, stale | model.dispatched_at.is_not(None),
                                                                 ~others))
                    if (kind, job.id) not in held]
        for job in rows:
            if held is not None and job.dispatched_at is not None and job.heartbeat_at is not None \
                    and _aware(job.heartbeat_at) >= cutoff:
                what = f"the worker process running stage '{job.stage}' ended without recording an outcome"
            else:
                what = f"the worker running stage '{job.stage}' sent no heartbeat for more than " \
                       f"{int(older_than_s)} s (worker lost)"
            outcome = lose(s, kind, job.id, job.attempts, what, max_attempts)
            if outcome is not False:
                out.append((kind, job.id, outcome))
    prune = datetime.now(timezone.utc) - timedelta(seconds=max(3600.0, 10 * older_than_s))
    s.execute(delete(Worker).where(Worker.heartbeat_at < prune))
    return out


def lose(s: Session, kind: str, job_id: str, attempt: int, what: str, max_attempts: int) -> str | None | bool:
    """The worker running `attempt` of the job is gone (`what` says how): one more loss. Under
    `max_attempts` losses the job goes back to the outbox (None; a plan's stage ends at the last heartbeat,
    when the worker was last known alive); at `max_attempts` the reason to fail it with (the caller fails
    it). False: the job finished or another attempt took over meanwhile."""
    model = KINDS[kind]
    job = s.get(model, job_id, populate_existing=True)
    if job is None or job.status in TERMINAL or job.attempts != attempt:
        return False
    losses = (job.losses or 0) + 1
    if losses >= max_attempts:
        s.execute(update(model).where(model.id == job_id, model.attempts == attempt).values(losses=losses))
        return f"{what}; its worker was lost {losses} times (FABRICPLAN_MAX_ATTEMPTS); submit it again or " \
               "check the workers"
    res = s.execute(update(model).where(model.id == job_id, model.status.not_in(TERMINAL), model.attempts == attempt)
                    .values(status="queued", dispatched_at=None, holder=None, losses=losses, updated_at=utcnow()))
    if not res.rowcount:
        return False
    if kind == "plan":
        last = stage_events.aware(job.heartbeat_at)
        stage_events.close_stage(s, job_id, job.stage, status="queued", progress=job.progress, now=last,
                                 message=f"{job.stage} ended at the worker's last heartbeat")
        s.execute(update(model).where(model.id == job_id).values(stage="queued"))
        s.add(PlanEvent(plan_id=job_id, status="queued", stage="queued", progress=job.progress,
                        message=f"{what}; delivered again (worker lost {losses} of {max_attempts} times)"))
    return None


def requeue(s: Session, kind: str, job_id: str, attempt: int) -> bool:
    """`attempt` of the job ended on a fault of the database (its writes refused), not of its worker: back to
    the outbox for the next attempt, counting no loss. False: finished or taken over meanwhile."""
    model = KINDS[kind]
    res = s.execute(update(model).where(model.id == job_id, model.status.not_in(TERMINAL), model.attempts == attempt)
                    .values(status="queued", dispatched_at=None, holder=None, updated_at=utcnow()))
    return bool(res.rowcount)


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)        # SQLite keeps no zone


def requeue_all(s: Session) -> int:
    """Every unfinished job back to the outbox (an embedded service starting: its previous process, and the
    worker processes it ran, are gone). Returns how many."""
    n = 0
    for model in KINDS.values():
        n += s.execute(update(model).where(model.status.not_in(TERMINAL))
                       .values(status="queued", dispatched_at=None, holder=None)).rowcount
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
