"""The embedded service's worker: the same Celery tasks, run eagerly, each job in a process of its own.

Job processes are forked from a fork server that imported the libraries and loaded the compiled kernels once
(workers.preload), so a job starts in milliseconds with nothing of the gateway's threads, connections or
locks. At most `worker_concurrency` jobs run at once. In a job process the memory limit is an address-space
cap (workers.limits) and each task arms the soft time limit; the process reports each task's start, and the
parent kills the job's process group `grace` after the soft limit if it did not stop by itself. A job process
that dies or is killed fails its job with the reason; notifications of committed changes (a new panel config,
an evaluation's result) travel to the gateway over the process's pipe.
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

    def start(self) -> None:
        if self._thread is None:
            warm = _context().Process(target=_noop)   # the fork server starts now (imports, kernels), not
            warm.start()                              # with the first job
            warm.join(timeout=120)
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

    # ----- supervision -------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
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
        while len(self.running) < self.settings.worker_concurrency:
            with self.lock:
                if not self.pending:
                    return
                job = self.pending.popleft()
            parent, child = multiprocessing.Pipe(duplex=False)
            job.process = _context().Process(target=_job_main, args=(self.settings, job.kind, job.job_id,
                                                                    job.attempt, child),
                                             name=f"fabricplan-{job.kind}-{job.job_id[:8]}", daemon=True)
            job.process.start()
            child.close()
            job.conn = parent
            job.deadline = time.monotonic() + STARTUP_S
            self.running.append(job)

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
                elif msg[0] == "failed":
                    job.killed_for = msg[1]
        except (EOFError, OSError):
            pass

    def _finished(self, job: _Job) -> None:
        self.running.remove(job)
        job.conn.close()
        code = job.process.exitcode
        if code == 0 and job.killed_for is None:
            return
        from services.jobs import attempts

        why = job.killed_for or (f"the worker process running stage '{_stage(job.task)}' died "
                                 f"({_exit(code)})")
        try:
            attempts.fail(job.kind, job.job_id, why, job.attempt, self.settings.sqlalchemy_url)
        except Exception:
            log.exception("could not record the failure of %s %s", job.kind, job.job_id)


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


def _job_main(settings: Settings, kind: str, job_id: str, attempt: int, conn: Connection) -> None:
    """A job process: the parent's settings, the limits, then the job's tasks run eagerly."""
    os.setpgrp()
    from services import config
    from services.store import notify

    from . import limits
    from .app import celery_app, configure

    config.install(settings)
    configure(celery_app, settings)
    lock = threading.Lock()

    def send(*msg):
        with lock:
            conn.send(msg)
    notify.set_sink(lambda channel, key: send("change", channel, key))
    limits.embed(lambda name: send("task", name), settings.task_time_limit_s)
    from .tasks import HEARTBEATS, job_signature, reason

    HEARTBEATS.start()
    limits.apply_memory_limit(settings.task_memory_limit_mb)

    try:
        job_signature(kind, job_id, attempt).apply()
    except BaseException as exc:        # what the task did not record itself: the parent records it
        why = reason(limits.current_task.rsplit(".", 1)[-1], exc)
        send("failed", why)
        os._exit(1)
    finally:
        conn.close()
