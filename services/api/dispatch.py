"""The outbox dispatcher and sweeper: one thread per API process.

A request only records its job (a plan or an evaluation) as a queued row and wakes this thread; the row is the
source of truth. Every `sweep_s` (and at once when woken) the thread
1. redelivers or fails running jobs whose worker stopped sending heartbeats (services.store.jobs.lost);
2. sends every queued job no worker has yet: to Celery over the broker (scaled), or to the embedded
   worker's job processes (workers.embedded). Scaled, a job sent `dispatch_resend_s` ago that no worker has
   started (its message lost: Redis restarted without persistence) is sent again with a new attempt. A job whose send fails (the broker is down) stays in the
   outbox and is sent by a later sweep once the broker answers; the request that queued it got its 202.
   Embedded, a job sent that the worker no longer holds and that did not finish (its outcome could not be
   recorded: the database refused its writes) is sent again the same way once the database takes writes,
   and a running one is lost at once (services.store.jobs, `held`).
A sweep after the database was away waits `stale_plan_s` before it looks for lost workers: the workers could
not beat while it was away either, and a fault of the database must never count as a lost worker. Embedded, each
sweep also beats this process's worker row (services.store.jobs.beat_worker, kind `embedded`): the metrics'
`fabricplan_workers_alive` counts the rows that beat recently, so a killed API process stops counting.
Viewers' jobs take at most `viewer_job_slots` workers at once (all viewer keys together; the rest wait in the
outbox, oldest first), so a viewer flooding on-demand compiles never holds every worker while a scheduler's
plan waits. Several API processes may sweep the same database: each send is a new attempt, and a worker writes only for
the job's current attempt, so a duplicate delivery stops at its first write.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from services.config import Settings
from services.store import jobs
from services.store.db import session_scope

log = logging.getLogger("fabricplan.dispatch")
RETRY_S = 1.0          # how soon a sweep that failed (database busy or away) is tried again


class Dispatcher:
    def __init__(self, settings: Settings, on_change: Callable[[str, str], None] = lambda c, k: None):
        self.settings = settings
        self.embedded = settings.embedded
        self.worker = None
        if self.embedded:
            from workers.embedded import EmbeddedWorker

            self.worker = EmbeddedWorker(settings, on_change)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.broker_ok = True
        self.database_ok = True
        self.database_back_at = float("-inf")

    def start(self) -> None:
        if self.embedded:          # this process's previous incarnation and its job processes are gone
            with session_scope(self.settings.sqlalchemy_url) as s:
                jobs.requeue_all(s)
            self.worker.start()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fabricplan-dispatcher", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """A job was queued: send it now rather than at the next sweep."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self.worker is not None:
            self.worker.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            # after a failed sweep (the database busy or away) try again within a second, not a whole period:
            # a job queued meanwhile was woken for and must not wait for the next periodic sweep
            self._wake.wait(self.settings.sweep_s if self.database_ok else min(self.settings.sweep_s, RETRY_S))
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sweep()
                if not self.database_ok:
                    self.database_ok, self.database_back_at = True, time.monotonic()
                    log.warning("the database answers again; lost workers are looked for after %s s",
                                self.settings.stale_plan_s)
            except Exception as exc:              # the database is down: the next sweep tries again
                if self.database_ok:
                    log.warning("outbox sweep failed: %s: %s", type(exc).__name__,
                                (str(exc).splitlines() or [""])[0][:200])
                self.database_ok = False

    def sweep(self) -> int:
        """One pass: lost workers, then the outbox. Returns the number of jobs sent."""
        from services.jobs.stages import attempts

        st = self.settings
        held = self.worker.held() if self.embedded else None     # read before the rows (jobs.lost)
        lost = []
        with session_scope(st.sqlalchemy_url) as s:
            if self.embedded:
                jobs.beat_worker(s, jobs.embedded_worker_id(), kind="embedded")
            if time.monotonic() - self.database_back_at > st.stale_plan_s:
                lost = jobs.lost(s, st.stale_plan_s, st.max_attempts, held,
                                 jobs.embedded_worker_id() if self.embedded else None)
        for kind, job_id, reason in lost:
            if reason is None:
                log.warning("%s %s: worker lost; delivered again", kind, job_id)
            else:
                log.warning("%s %s failed: %s", kind, job_id, reason)
                attempts.fail(kind, job_id, reason, url=st.sqlalchemy_url)
        resend = st.sweep_s if self.embedded else st.dispatch_resend_s   # embedded: `held` says what is lost
        with session_scope(st.sqlalchemy_url) as s:
            pending = jobs.undispatched(s, resend_after_s=resend, held=held)
            owners = jobs.owners(s, pending)
            viewer_busy = jobs.in_flight_by(s, jobs.VIEWER)
        sent = 0
        for kind, job_id in pending:
            viewer = (owners.get((kind, job_id)) or "").startswith(jobs.VIEWER)
            if viewer and viewer_busy >= st.viewer_job_slots:
                continue                          # waits in the outbox: schedulers keep a worker slot
            if self._send(kind, job_id, resend):
                sent += 1
                viewer_busy += viewer
        return sent

    def _send(self, kind: str, job_id: str, resend_after_s: float | None = None) -> bool:
        url = self.settings.sqlalchemy_url
        with session_scope(url) as s:
            attempt = jobs.begin_dispatch(s, kind, job_id, resend_after_s)
        if attempt is None:
            return False
        try:
            if self.embedded:
                self.worker.submit(kind, job_id, attempt)
            else:
                from workers.tasks import job_signature

                job_signature(kind, job_id, attempt).apply_async(retry=False)
            self.broker_ok = True
        except Exception as exc:                  # the broker is away: the job stays in the outbox
            if self.broker_ok:
                log.warning("broker unreachable (%s: %s); %s %s waits in the outbox", type(exc).__name__, exc,
                            kind, job_id)
            self.broker_ok = False
            with session_scope(url) as s:
                jobs.undo_dispatch(s, kind, job_id, attempt)
            return False
        with session_scope(url) as s:
            jobs.mark_dispatched(s, kind, job_id, attempt, jobs.embedded_worker_id() if self.embedded else None)
        return True
