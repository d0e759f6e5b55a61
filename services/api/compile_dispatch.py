"""Hands compile jobs to workers: the Celery task `fabricplan.compile_xml` over the broker, or (embedded
default) the same task run eagerly on a one-thread pool in this process. The request handler only records the
job and answers 202; the compile runs here."""
from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor

from services.compiler.api import CompileOptions
from services.config import Settings

log = logging.getLogger("fabricplan.compile")


class CompileDispatcher:
    def __init__(self, settings: Settings):
        self.embedded = settings.embedded
        self._pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        if self.embedded and self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fabricplan-compiler")

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def submit(self, plan_id: str, collective: str, options: CompileOptions) -> None:
        from workers.tasks import compile_xml

        kwargs = {"plan_id": plan_id, "collective": collective, "options": dataclasses.asdict(options)}
        if self._pool is not None:
            self._pool.submit(_run_eagerly, kwargs)
        else:
            compile_xml.apply_async(kwargs=kwargs)


def _run_eagerly(kwargs: dict) -> None:
    from workers.tasks import compile_xml

    try:
        compile_xml.apply(kwargs=kwargs)
    except Exception:                               # the job records its own failure; keep serving others
        log.exception("compile %s failed", kwargs)
