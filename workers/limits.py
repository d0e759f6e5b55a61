"""Time and memory limits of worker tasks, the same in a Celery worker and in the embedded service.

Memory: `apply_memory_limit` caps the address space (RLIMIT_AS) of a worker process at what it has mapped
now plus the task memory limit, so an allocation beyond it raises MemoryError inside the task, which fails
its job with that reason (Celery prefork children get it from `worker_process_init`; the embedded worker's
job processes at their start).

Time: Celery raises SoftTimeLimitExceeded in a task at `task_soft_time_limit` and kills the process
`grace_s` later (the job then fails from `on_failure`). An embedded job process arms the same soft limit
with SIGALRM at every task start (`task_started`) and tells its parent, which kills it after the grace.
"""
from __future__ import annotations

import signal
from typing import Callable

from celery.exceptions import SoftTimeLimitExceeded

from services.runtime import address_space, apply_memory_limit

__all__ = ["apply_memory_limit", "grace_s", "task_started", "task_finished", "embed", "address_space"]

_report: Callable[[str], None] | None = None     # set in an embedded job process: tells the parent
_soft_s: float | None = None
current_task = "starting"


def grace_s(limit_s: float) -> float:
    """Between the soft limit (an exception in the task) and the hard one (the process is killed)."""
    return max(5.0, min(60.0, limit_s / 10))


def _alarm(signum, frame):
    raise SoftTimeLimitExceeded(f"soft time limit ({_soft_s:g} s) exceeded")


def embed(report: Callable[[str], None], soft_limit_s: float) -> None:
    """In an embedded job process: report task starts to the parent and arm the soft limit per task."""
    global _report, _soft_s
    _report, _soft_s = report, soft_limit_s
    signal.signal(signal.SIGALRM, _alarm)


def task_started(name: str) -> None:
    global current_task
    current_task = name
    if _report is not None:
        _report(name)
        signal.setitimer(signal.ITIMER_REAL, _soft_s)


def task_finished() -> None:
    if _report is not None:
        signal.setitimer(signal.ITIMER_REAL, 0)
