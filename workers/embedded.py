"""The embedded service's worker: the same Celery tasks, run eagerly, each job in a process of its own.

Job processes are forked from a fork server that imported the libraries and loaded the compiled kernels once
(workers.preload), so a job starts in milliseconds with nothing of the gateway's threads, connections or
locks. At most `worker_concurrency` jobs run at once. In a job process the memory limit is an address-space
cap (workers.limits) and each task arms the soft time limit; the process reports each task's start, and the
parent kills the job's process group `grace` after the soft limit if it did not stop by itself. A job process
that dies or is killed fails its job with the reason; notifications of committed changes (a new panel config,
an evaluation's result) and the metrics observed when work ends (services.store.job_metrics) travel to the
gateway over the process's pipe.

The worker says which jobs it holds (`held`: queued here, running, or ended with a failure not yet recorded).
The worker supervises its job processes, so a job it holds is never lost for a late heartbeat (services.store.
jobs.lost): SQLite busy with other writers delays a beat, never fails a job. How a job process ended is
recorded by the worker (`outcomes`, held until the database takes it, tried again every loop):
- it stopped at a limit (time, memory) or on an error of its job: the job fails with the reason;
- it died (a signal, e.g. SIGKILL): its worker is lost, as a Celery worker would be; the job is delivered again
  and fails only once `max_attempts` workers were lost (services.store.jobs.lose);
- its writes were refused (the database away, locked, or full): back to the outbox, no loss counted, sent
  again once the database takes writes (services.store.jobs.requeue). A database fault delays a job, never
  fails it.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Callable

from services.config import Settings

from .limits import grace_s

log = logging.getLogger("fabricplan.embedded")
PRELOAD = ["workers.preload"]
STARTUP_S = 60.0            # a job process that has not started its first task by then is killed


def _context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


@dataclass
class _Job:
    kind: str
    job_id: str
    attempt: int
    process: object = None
    conn: Connection | None = None
    task: str = "starting"
    deadline: float = float("inf")
    killed_for: str | None = None
    database_error: str | None = None
    started: float = field(default_factory=time.monotonic)


class EmbeddedWorker:
    def __init__(self, settings: Settings, on_change: Callable[[str, str], None]):
        self.settings = settings
        self.on_change = on_change
        self.pending: deque[_Job] = deque()
        self.running: list[_Job] = []
        self.lock = threading.Lock()
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.starting: _Job | None = None
        self.unrecorded: dict[tuple[str, str], tuple[int, str, str]] = {}  # (attempt, action, why) to record

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fabricplan-embedded-worker", daemon=True)
            self._thread.start()

    def submit(self, kind: str, job_id: str, attempt: int) -> None:
        with self.lock:
            self.pending.append(_Job(kind, job_id, attempt))
        self._wake_w.send(None)

    def stop(self) -> None:
        self._stop.set()
        self._wake_w.send(None)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        for job in list(self.running):
            _kill(job)

    def busy(self) -> int:
        with self.lock:
            return len(self.pending) + len(self.running)

    def held(self) -> set[tuple[str, str]]:
        """(kind, id) of every job this worker still holds: never to be sent again while it does."""
        with self.lock:
            jobs = [*self.pending, *self.running] + ([self.starting] if self.starting else [])
            return {(j.kind, j.job_id) for j in jobs} | set(self.unrecorded)

    # ----- supervision -------------------------------------------------------------------------------
    def _run(self) -> None:
        # the fork server starts now (imports, compiled kernels: workers.preload), in this thread: the API
        # answers meanwhile, and the first job's process starts once the fork server has loaded them
        try:
            warm = _context().Process(target=_noop)
            warm.start()
            warm.join()
        except Exception:                                      # each job's start then says why
            log.exception("embedded worker: the fork server did not start")
        while not self._stop.is_set():
            try:
                self._record_failures()
                self._start_jobs()
                ready = wait([self._wake_r] + [j.conn for j in self.running] + [j.process.sentinel for j in self.running],
                             timeout=1.0)
                if self._wake_r in ready:
                    while self._wake_r.poll():
                        self._wake_r.recv()
                for job in list(self.running):
                    self._read(job)
                    if job.process.exitcode is not None:
                        self._finished(job)
                    elif time.monotonic() > job.deadline and job.killed_for is None:
                        job.killed_for = (f"stage '{_stage(job.task)}' exceeded the time limit of "
                                          f"{self.settings.task_time_limit_s} s (FABRICPLAN_TASK_TIME_LIMIT_S)"
                                          if job.task != "starting" else
                                          f"the worker process did not start within {STARTUP_S:g} s")
                        _kill(job)
            except Exception:                                  # keep supervising
                log.exception("embedded worker loop")
                time.sleep(0.5)

    def _start_jobs(self) -> None:
        from services.store.jobs import embedded_worker_id

        while len(self.running) < self.settings.worker_concurrency:
            with self.lock:
                if not self.pending:
                    return
                job = self.starting = self.pending.popleft()
            parent, child = multiprocessing.Pipe(duplex=False)
            from services.store import notify

            job.process = _context().Process(target=_job_main, args=(self.settings, job.kind, job.job_id,
                                                                    job.attempt, child, notify.origin(),
                                                                    embedded_worker_id()),
                                             name=f"fabricplan-{job.kind}-{job.job_id[:8]}", daemon=True)
            job.process.start()
            child.close()
            job.conn = parent
            job.deadline = time.monotonic() + STARTUP_S
            with self.lock:
                self.running.append(job)
                self.starting = None

    def _read(self, job: _Job) -> None:
        try:
            while job.conn.poll():
                msg = job.conn.recv()
                if msg[0] == "task":
                    job.task = msg[1]
                    limit = self.settings.task_time_limit_s
                    job.deadline = time.monotonic() + limit + grace_s(limit)
                elif msg[0] == "change":
                    self.on_change(msg[1], msg[2])
                elif msg[0] == "metric":            # observed in this process's metrics
                    from services.store import job_metrics

                    job_metrics.deliver(job_metrics.Observation(msg[1], tuple(msg[2]), msg[3]))
                elif msg[0] == "failed":
                    job.killed_for = msg[1]
                elif msg[0] == "database":
                    job.database_error = msg[1]
        except (EOFError, OSError):
            pass

    def _finished(self, job: _Job) -> None:
        code = job.process.exitcode
        job.conn.close()
        if code == 0 and job.killed_for is None:
            with self.lock:
                self.running.remove(job)
            return
        if job.database_error is not None and job.killed_for is None:     # the job's writes were refused: sent
            log.warning("%s %s: the database refused its writes (%s); it is sent again once the database "
                        "takes writes", job.kind, job.job_id, job.database_error)
            action, why = "requeue", job.database_error
        elif job.killed_for is not None:
            action, why = "fail", job.killed_for
        elif code < 0:                                 # died of a signal: its worker is lost
            action, why = "lost", (f"the worker process running stage '{_stage(job.task)}' died "
                                   f"({_exit(code)})")
        else:
            action, why = "fail", (f"the worker process running stage '{_stage(job.task)}' ended "
                                   f"({_exit(code)})")
        with self.lock:
            self.running.remove(job)
            self.unrecorded[(job.kind, job.job_id)] = (job.attempt, action, why)
        self._record_failures()

    def _record_failures(self) -> None:
        """Record how ended jobs ended (failed, lost, back to the outbox); those the database refuses stay
        held and are tried again."""
        if not self.unrecorded:
            return
        from services.jobs.stages import attempts
        from services.store import jobs
        from services.store.db import session_scope

        url = self.settings.sqlalchemy_url
        with self.lock:
            todo = list(self.unrecorded.items())
        for (kind, job_id), (attempt, action, why) in todo:
            try:
                if action == "requeue":
                    with session_scope(url) as s:
                        jobs.requeue(s, kind, job_id, attempt)
                elif action == "lost":
                    with session_scope(url) as s:
                        outcome = jobs.lose(s, kind, job_id, attempt, why, self.settings.max_attempts)
                    if isinstance(outcome, str):
                        attempts.fail(kind, job_id, outcome, attempt, url)
                    elif outcome is None:
                        log.warning("%s %s: %s; delivered again", kind, job_id, why)
                else:
                    attempts.fail(kind, job_id, why, attempt, url)
            except Exception as exc:
                log.warning("could not record the outcome of %s %s (%s: %s); trying again", kind, job_id,
                            type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
                return
            with self.lock:
                self.unrecorded.pop((kind, job_id), None)


def _noop() -> None:
    pass


def _stage(task: str) -> str:
    return task.rsplit(".", 1)[-1]


def _exit(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        return f"signal {name}" + (": out of memory?" if -code == signal.SIGKILL else "")
    return f"exit code {code}"


def _kill(job: _Job) -> None:
    try:
        os.killpg(job.process.pid, signal.SIGKILL)       # the job process leads its own group (its pool too)
    except (ProcessLookupError, PermissionError):
        pass


def _job_main(settings: Settings, kind: str, job_id: str, attempt: int, conn: Connection,
              origin: str | None = None, holder: str | None = None) -> None:
    """A job process: the parent's settings, the limits, then the job's tasks run eagerly, holding the job as
    the parent's embedded worker (`holder`), whose row beats and which supervises this process."""
    os.setpgrp()
    from services import config
    from services.store import job_metrics, jobs, notify

    from . import limits
    from .app import celery_app, configure

    config.install(settings)
    configure(celery_app, settings)
    if holder is not None:
        jobs.hold_as(holder)
    lock = threading.Lock()

    def send(*msg):
        with lock:
            conn.send(msg)
    notify.set_sink(lambda channel, key: send("change", channel, key))
    job_metrics.set_sink(lambda obs: send("metric", obs.family, obs.labels, obs.value))
    if origin is not None:              # its changes reach its API process through the pipe, not the feed
        notify.set_origin(origin)
    limits.embed(lambda name: send("task", name), settings.task_time_limit_s)
    from .tasks import HEARTBEATS, database_error, job_signature, reason

    HEARTBEATS.start()
    limits.apply_memory_limit(settings.task_memory_limit_mb)

    try:
        job_signature(kind, job_id, attempt).apply()
    except BaseException as exc:        # what the task did not record itself: the parent records it
        db = database_error(exc)
        if db is not None:              # its writes refused: not a failure of the job, sent again
            send("database", db)
        else:
            send("failed", reason(limits.current_task.rsplit(".", 1)[-1], exc))
        os._exit(1)
    finally:
        conn.close()
