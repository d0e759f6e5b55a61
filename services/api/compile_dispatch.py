"""Hands compile jobs to workers: the Celery task `fabricplan.compile_xml` over the broker, or (embedded
default) an in-process worker thread running the same task eagerly. The request handler only records the job
and answers 202; the compile runs here."""
from __future__ import annotations

import dataclasses
import logging
import queue
import threading

from services.compiler.api import CompileOptions
from services.config import Settings

log = logging.getLogger("fabricplan.compile")


class CompileDispatcher:
    def __init__(self, settings: Settings):
        self.embedded = settings.embedded
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.embedded and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fabricplan-compiler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def submit(self, plan_id: str, collective: str, options: CompileOptions) -> None:
        from workers.tasks import compile_xml

        kwargs = {"plan_id": plan_id, "collective": collective, "options": dataclasses.asdict(options)}
        if self.embedded:
            self._queue.put(kwargs)
        else:
            compile_xml.apply_async(kwargs=kwargs)

    def _run(self) -> None:
        from workers.tasks import compile_xml

        while True:
            kwargs = self._queue.get()
            try:
                if kwargs is None:
                    return
                compile_xml.apply(kwargs=kwargs)
            except Exception:                      # the job records its own failure; keep serving others
                log.exception("compile %s failed", kwargs)
            finally:
                self._queue.task_done()
