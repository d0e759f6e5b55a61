"""Job tasks: thin wrappers over the job kinds of services.jobs (plan stages: services.jobs.kinds.plan; evaluations,
compile jobs, plan revisions). A chain per plan:

    frontier -> select (a training job: its iteration on every entry) -> fabric (hosts, ports, panel configs)
             -> schedules (-> chord(group(bfb_block...), merge) for large BFB solves)
             -> alltoall (when the workload has one)
             -> compile (scaled: chord(group(compile_unit...), compile_collect): one task per XML file,
                runtimes x collectives x size ranges; embedded: the job process's fork pool) -> finish

plus compile_xml: one schedule compiled for other options on demand (GET .../schedules/{c}?format=msccl&...).

and a chain per plan revision (services.jobs.kinds.revision: failed links reported on a done plan):

    repair (re-patch onto spare ports) -> schedules (degraded topology, verified) -> compile -> finish

Every task runs one delivery attempt of its job (the `attempt` keyword the dispatcher adds) under the time and
memory limits (workers.limits). It takes its job when it starts and releases it when it ends (services.store.
jobs.take, release): while the task runs, its worker process holds the job and its heartbeat thread beats the
worker's row and the job's; between two tasks nobody holds the job, so time in the queue never makes it lost.
A release the database refuses is made by the heartbeat thread once the database answers. Input errors, the time
limit and the memory limit fail the job with that reason and stop the chain; transient errors retry
(bounded); a task whose job finished or was delivered again stops without writing; anything else fails the
job with the stage and the error once the retries are used up. A worker process that dies is retried a
bounded number of times (retry_on_worker_lost), then its job fails with that reason.
"""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager

from celery import chain, chord, group, signals
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from billiard.exceptions import WorkerLostError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from services.jobs.stages import attempts, compile_stage, early_compile
from services.jobs.kinds import compiling, evaluation, revision
from services.jobs.stages.compile_units import CompileUnit
from services.jobs.kinds.plan import alltoall, fabric, finish, schedules, select
from services.config import get_settings
from services.store import jobs
from services.store.db import session_scope
from services.synthesis.bfb.lp import ScheduleTooLarge

from . import limits
from .app import celery_app

log = logging.getLogger("fabricplan.worker")
TRANSIENT = (OperationalError, InterfaceError, ConnectionError, TimeoutError)
DATABASE_AWAY = (OperationalError, InterfaceError)       # the database did not answer or refused a write
INPUT_ERRORS = (attempts.PlanInputError, ScheduleTooLarge, ValueError)


class JobTask(celery_app.Task):
    """A task of one job (`kind` plan or evaluation, its id in the keyword `id_kw`)."""

    kind = "plan"
    id_kw = "plan_id"
    typing = False                 # `attempt` is consumed here, not by the task function
    autoretry_for = TRANSIENT
    retry_backoff = 2
    retry_backoff_max = 60
    retry_on_worker_lost = True
    default_retry_delay = 1        # a lost pool process: run again at once (not Celery's 3 minutes)

    @property
    def max_retries(self) -> int:
        """Retries of a transient fault (`autoretry_for`) before the task fails: FABRICPLAN_TASK_MAX_RETRIES,
        read when a retry is decided, so a deployment's setting holds without re-importing the tasks."""
        return get_settings().task_max_retries

    def __call__(self, *args, **kwargs):
        attempt = kwargs.pop("attempt", None)
        job_id = kwargs.get(self.id_kw)
        stage = self.name.rsplit(".", 1)[-1]
        limits.task_started(self.name)
        try:
            with attempts.attempt_of(attempt), HEARTBEATS.holding(self.kind, job_id, attempt):
                return super().__call__(*args, **kwargs)
        except attempts.Superseded:
            return {"stop": True}
        except (*INPUT_ERRORS, SoftTimeLimitExceeded, MemoryError) as exc:
            failure = reason(stage, exc)      # recorded below, once the task's frames (and memory) are freed
        finally:
            limits.task_finished()
        with attempts.attempt_of(attempt):
            attempts.fail(self.kind, job_id, failure)
        return {"stop": True}

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        job_id = kwargs.get(self.id_kw)
        if self.kind == "plan" and isinstance(job_id, str):
            early_compile.cancel(job_id)        # the chain ends here: no compile stage will take them
        if database_error(exc) is not None:     # retried and still away: the job is delivered again (lost worker,
            return                              # or the embedded outbox), not failed with the database's words
        if isinstance(job_id, str):
            attempts.fail(self.kind, job_id, reason(self.name.rsplit(".", 1)[-1], exc), kwargs.get("attempt"))


class EvaluationTask(JobTask):
    kind = "evaluation"
    id_kw = "evaluation_id"


class CompileTask(JobTask):
    kind = "compile"
    id_kw = "job_id"


class RevisionTask(JobTask):
    kind = "revision"
    id_kw = "revision_id"


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def database_error(exc: BaseException) -> str | None:
    """A short text (the driver's error class and first line, never the SQL or its parameters) when the
    database did not answer or refused a write anywhere in the exception's chain, else None."""
    for e in _chain(exc):
        if isinstance(e, DATABASE_AWAY):
            return _db_text(e)
    return None


def _db_text(exc: DBAPIError) -> str:
    orig = exc.orig if exc.orig is not None else exc
    first = (str(orig).strip().splitlines() or [""])[0][:200]
    return f"{type(orig).__name__}: {first}"


def reason(stage: str, exc: BaseException) -> str:
    """What a person reads in the job's `reason` (a MemoryError anywhere in the chain is the memory limit:
    handling it may fail again for want of memory)."""
    st = get_settings()
    if any(isinstance(e, MemoryError) for e in _chain(exc)):
        exc = MemoryError()
    if isinstance(exc, (SoftTimeLimitExceeded, TimeLimitExceeded)):
        return f"stage '{stage}' exceeded the time limit of {st.task_time_limit_s} s (FABRICPLAN_TASK_TIME_LIMIT_S)"
    if isinstance(exc, MemoryError):
        return (f"stage '{stage}' exceeded the memory limit of {st.task_memory_limit_mb} MiB "
                "(FABRICPLAN_TASK_MEMORY_LIMIT_MB)")
    if isinstance(exc, WorkerLostError):
        return f"the worker process running stage '{stage}' died ({exc}); it was retried and died again"
    if isinstance(exc, INPUT_ERRORS):
        return f"{stage}: {exc}"
    if isinstance(exc, DBAPIError):             # the SQL and its parameters are no reason for a person
        return f"internal error in stage '{stage}': the database refused it ({_db_text(exc)})"
    return f"internal error in stage '{stage}': {type(exc).__name__}: {exc}"


def _one_line(exc: BaseException) -> str:
    """An error in one line: the driver's class and first line for a database error, never a traceback."""
    db = database_error(exc)
    if db is not None:
        return db
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"


# a bookkeeping write of the worker (take, release): a database fault is retried with backoff for a few
# seconds (a busy SQLite, a PostgreSQL failover), then left to the heartbeat thread
_bookkeeping = retry(retry=retry_if_exception_type(DATABASE_AWAY), wait=wait_exponential(multiplier=0.1, max=2.0),
                     stop=stop_after_delay(10.0), reraise=True)


class Heartbeats:
    """One thread per worker process beats the worker's row (scaled: services.store.jobs.beat_worker, its
    liveness) and the heartbeat of the jobs its tasks hold (a thread: a task may sit in one long numpy call),
    and makes the releases the database refused when the task ended. Started before the memory limit
    applies, so no task ever needs to create a thread under it. A beat the database refuses (SQLite busy with
    another writer, PostgreSQL restarting) is one line in the log; the next beat tries again."""

    def __init__(self):
        self.jobs: dict[int, tuple[str, str, int | None]] = {}
        self.unreleased: dict[tuple[str, str, int | None], str] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.failing = False

    def start(self) -> None:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, daemon=True, name="fabricplan-heartbeat")
                self.thread.start()

    @contextmanager
    def holding(self, kind: str, job_id, attempt: int | None):
        """The job is held by this worker while the block runs (taken, beaten, released)."""
        if not isinstance(job_id, str):
            yield
            return
        self.start()
        me = jobs.worker_id()
        url = get_settings().sqlalchemy_url
        try:
            _bookkeeping(self._take)(url, kind, job_id, attempt, me)
        except DATABASE_AWAY as exc:      # the task's own writes will meet the same fault and retry
            log.warning("%s %s: could not take the job (%s)", kind, job_id, _one_line(exc))
        token = object()
        with self.lock:
            self.jobs[id(token)] = (kind, job_id, attempt)
        try:
            yield
        finally:
            with self.lock:
                self.jobs.pop(id(token), None)
            try:
                _bookkeeping(self._release)(url, kind, job_id, attempt, me)
            except DATABASE_AWAY as exc:
                log.warning("%s %s: release deferred to the heartbeat thread (%s)", kind, job_id, _one_line(exc))
                with self.lock:
                    self.unreleased[(kind, job_id, attempt)] = me

    running = holding

    @staticmethod
    def _take(url: str, kind: str, job_id: str, attempt: int | None, me: str) -> None:
        with session_scope(url) as s:
            if not get_settings().embedded:
                jobs.beat_worker(s, me)
            jobs.take(s, kind, job_id, attempt, me)

    @staticmethod
    def _release(url: str, kind: str, job_id: str, attempt: int | None, me: str) -> None:
        """Scaled: the job waits for its next task, held by nobody. Embedded: the next task runs in this
        process and its API process's worker holds the job until the process ends (released here, another
        API process of `serve --workers N` would count it lost between two tasks)."""
        if get_settings().embedded:
            return
        with session_scope(url) as s:
            jobs.release(s, kind, job_id, attempt, me)

    def beat_once(self) -> None:
        """One beat: the worker's row (scaled), the jobs held here, the releases still to make."""
        st = get_settings()
        me = jobs.worker_id()
        with self.lock:
            running = list(self.jobs.values())
            unreleased = list(self.unreleased.items())
        if st.embedded and not running and not unreleased:     # an idle job process: nothing to beat
            return
        try:
            with session_scope(st.sqlalchemy_url) as s:
                if not st.embedded:
                    jobs.beat_worker(s, me)
                for kind, job_id, attempt in running:
                    jobs.beat(s, kind, job_id, attempt, me)
            for (kind, job_id, attempt), holder in unreleased:
                self._release(st.sqlalchemy_url, kind, job_id, attempt, holder)
                with self.lock:
                    self.unreleased.pop((kind, job_id, attempt), None)
            if self.failing:
                log.warning("heartbeats recorded again")
            self.failing = False
        except Exception as exc:                        # the database is away or busy: the next beat may succeed
            log.warning("heartbeat of %d jobs not recorded (%s); trying again in %g s", len(running),
                        _one_line(exc), self.period())
            self.failing = True

    @staticmethod
    def period() -> float:
        st = get_settings()
        return min(st.heartbeat_s, st.stale_plan_s / 4)

    def _run(self) -> None:
        while True:
            time.sleep(self.period())
            self.beat_once()


HEARTBEATS = Heartbeats()


@signals.task_failure.connect
def _worker_lost(sender=None, exception=None, kwargs=None, **_):
    """A worker process that died on every retry (the pool reports it in the worker's main process)."""
    if isinstance(exception, WorkerLostError) and isinstance(sender, JobTask) and kwargs:
        job_id = kwargs.get(sender.id_kw)
        if isinstance(job_id, str):
            attempts.fail(sender.kind, job_id, reason(sender.name.rsplit(".", 1)[-1], exception),
                          kwargs.get("attempt"))


@signals.worker_process_init.connect
def _limit_memory(**_):
    HEARTBEATS.start()
    limits.apply_memory_limit(get_settings().task_memory_limit_mb)


@celery_app.task(base=JobTask, name="fabricplan.frontier")
def plan_frontier(*, plan_id: str) -> dict:
    return select.stage_frontier(plan_id)


@celery_app.task(base=JobTask, name="fabricplan.select")
def plan_select(state: dict, *, plan_id: str) -> dict:
    return select.stage_select(state, plan_id)


@celery_app.task(base=JobTask, name="fabricplan.fabric")
def plan_fabric(state: dict, *, plan_id: str) -> dict:
    return fabric.stage_fabric(state, plan_id)


@celery_app.task(base=JobTask, bind=True, name="fabricplan.schedules")
def plan_schedules(self, state: dict, *, plan_id: str) -> dict:
    blocks = schedules.fanout_plan(state, plan_id)
    if blocks:     # one large BFB solve: fan out receiver blocks over the workers, merge in a chord
        expr = state["selected"]["expr"]
        attempt = attempts.current_attempt()
        return self.replace(chord(group(bfb_block.s(plan_id=plan_id, attempt=attempt, expr=expr, transposed=o,
                                                    receivers=r) for o, r in blocks),
                                  merge_blocks.s(state=state, plan_id=plan_id, attempt=attempt)))
    return schedules.stage_schedules(state, plan_id)


@celery_app.task(base=JobTask, name="fabricplan.bfb_block")
def bfb_block(*, plan_id: str, expr: str, transposed: bool, receivers: list[int]) -> str:
    return schedules.stage_bfb_block(plan_id, expr, transposed, receivers)


@celery_app.task(base=JobTask, name="fabricplan.merge_blocks")
def merge_blocks(digests: list, *, state: dict, plan_id: str) -> dict:
    if any(not isinstance(d, str) for d in digests):           # a block stopped (its plan failed meanwhile)
        return {"stop": True}
    return schedules.stage_schedules(state, plan_id, digests)


@celery_app.task(base=JobTask, name="fabricplan.alltoall")
def plan_alltoall(state: dict, *, plan_id: str) -> dict:
    return alltoall.stage_alltoall(state, plan_id)


@celery_app.task(base=JobTask, bind=True, name="fabricplan.compile")
def plan_compile(self, state: dict, *, plan_id: str) -> dict:
    if get_settings().embedded or state.get("stop"):     # embedded: the job process's fork pool
        return compile_stage.stage_compile(state, plan_id, attempts.advance)
    units, skipped = compile_stage.stage_units(state, plan_id)
    work = [u for u in units if not u.alias]
    if not work:
        return compile_stage.collect(state, plan_id, units, skipped)
    attempts.advance(plan_id, "compile", 0.96, f"compiling {len(work)} XML files")
    attempt = attempts.current_attempt()
    # one task per file over the workers, collected by a chord; each compiles in a forked process of its
    # own, so a killed compile fails only its file (services.jobs.stages.compile_pool)
    return self.replace(chord(group(compile_unit.s(plan_id=plan_id, attempt=attempt, unit=u.as_dict(),
                                                   total=len(work)) for u in work),
                              compile_collect.s(state=state, plan_id=plan_id, attempt=attempt,
                                                units=[u.as_dict() for u in units], skipped=skipped)))


@celery_app.task(base=JobTask, name="fabricplan.compile_unit")
def compile_unit(*, plan_id: str, unit: dict, total: int) -> dict:
    return compile_stage.stage_compile_unit(plan_id, CompileUnit.from_dict(unit), total, attempts.advance)


@celery_app.task(base=JobTask, name="fabricplan.compile_collect")
def compile_collect(results: list, *, state: dict, plan_id: str, units: list[dict], skipped: dict) -> dict:
    if any(isinstance(r, dict) and r.get("stop") for r in results):     # a unit saw its plan end meanwhile
        return {"stop": True}
    return compile_stage.collect(state, plan_id, [CompileUnit.from_dict(u) for u in units], skipped)


@celery_app.task(base=CompileTask, name="fabricplan.compile_xml")
def compile_xml(*, job_id: str) -> dict:
    """One schedule compiled for one set of options (the API answered 202 and the client polls)."""
    return compiling.run(job_id)


@celery_app.task(base=JobTask, name="fabricplan.finish")
def plan_finish(state: dict, *, plan_id: str) -> dict:
    return finish.stage_finish(state, plan_id)


@celery_app.task(base=EvaluationTask, name="fabricplan.evaluate")
def evaluate_topology(*, evaluation_id: str) -> dict:
    return evaluation.run(evaluation_id)


@celery_app.task(base=RevisionTask, name="fabricplan.revision_repair")
def revision_repair(*, revision_id: str) -> dict:
    return revision.stage_repair(revision_id)


@celery_app.task(base=RevisionTask, name="fabricplan.revision_schedules")
def revision_schedules(state: dict, *, revision_id: str) -> dict:
    return revision.stage_schedules(state, revision_id)


@celery_app.task(base=RevisionTask, name="fabricplan.revision_compile")
def revision_compile(state: dict, *, revision_id: str) -> dict:
    return revision.stage_compile(state, revision_id)


@celery_app.task(base=RevisionTask, name="fabricplan.revision_finish")
def revision_finish(state: dict, *, revision_id: str) -> dict:
    return revision.stage_finish(state, revision_id)


def revision_workflow(revision_id: str, attempt: int | None = None):
    """One plan revision (delivery `attempt`) as one Celery canvas: repair -> schedules -> compile (the plan's
    compile stage on the revision's schedules) -> finish."""
    kw = {"revision_id": revision_id, "attempt": attempt}
    return chain(revision_repair.si(**kw), revision_schedules.s(**kw), revision_compile.s(**kw),
                 revision_finish.s(**kw))


def plan_workflow(plan_id: str, attempt: int | None = None):
    """The whole plan (delivery `attempt`) as one Celery canvas."""
    kw = {"plan_id": plan_id, "attempt": attempt}
    return chain(plan_frontier.si(**kw), plan_select.s(**kw), plan_fabric.s(**kw), plan_schedules.s(**kw),
                 plan_alltoall.s(**kw), plan_compile.s(**kw), plan_finish.s(**kw))


def job_signature(kind: str, job_id: str, attempt: int):
    """What the dispatcher sends for one delivery of a job."""
    if kind == "plan":
        return plan_workflow(job_id, attempt)
    if kind == "compile":
        return compile_xml.si(job_id=job_id, attempt=attempt)
    if kind == "revision":
        return revision_workflow(job_id, attempt)
    return evaluate_topology.si(evaluation_id=job_id, attempt=attempt)
