"""Hands plans to workers: Celery over the broker, or (embedded default) an in-process worker thread that
runs the very same Celery tasks eagerly. A plan is recorded before it is dispatched, and orphaned plans of a
restarted embedded service are dispatched again."""
from __future__ import annotations

import logging
import queue
import threading

from services.config import Settings

log = logging.getLogger("fabricplan.dispatch")


class Dispatcher:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.embedded = settings.embedded
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.embedded and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fabricplan-worker", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def submit(self, plan_id: str) -> None:
        from workers.tasks import plan_workflow

        if self.embedded:
            self._queue.put(plan_id)
        else:
            plan_workflow(plan_id).apply_async()

    def _run(self) -> None:
        from services import planner
        from workers.tasks import plan_workflow

        while True:
            plan_id = self._queue.get()
            try:
                if plan_id is None:
                    return
                plan_workflow(plan_id).apply()
            except Exception as exc:                   # an unexpected error: record it with the stage
                log.warning("plan %s failed: %s", plan_id, exc)
                try:
                    planner.fail_plan(plan_id, f"internal error in stage '{planner.current_stage(plan_id)}': "
                                               f"{type(exc).__name__}: {exc}")
                except Exception:                      # pragma: no cover - database down
                    log.exception("could not record the failure of plan %s", plan_id)
            finally:
                self._queue.task_done()
