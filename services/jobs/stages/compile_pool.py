"""Compile units run in forked processes, in parallel within a memory budget.

Each unit (services.jobs.stages.compile_units) is compiled in a process forked from the caller (the embedded
worker's job process, or a Celery pool process), so the libraries and compiled kernels are there at once and
a compile that is killed takes only its own process: the unit's file fails with the reason and the others
go on. At most `processes` run at once, and the estimated peak bytes of the units running add up to at most
`budget_bytes`; a unit estimated above the budget runs alone. Each process's address space is capped at the
budget (RLIMIT_AS: an allocation beyond it is a MemoryError, which the compile job records as its refusal), and
a process still running `time_limit_s` after its start is killed (SIGKILL) and its file failed with that
reason.

`run_one(unit)` runs in the child and records the unit's outcome itself (services.jobs.stages.compile_stage.compile_job
stores the file or the refusal); `fail_one(unit, reason)` runs in the parent for a child that died or was
killed before it recorded anything (a recorded outcome is kept: compile jobs are written once). With
`collect`, what `run_one` returns travels back instead (pickled to a file of the parent's, read once the child
exited normally) and `collect(unit, value)` runs in the parent (services.jobs.stages.early_compile: the outcome is
recorded only once the schedule it compiled is verified).
"""
from __future__ import annotations

import logging
import os
import pickle
import signal
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from services.runtime import apply_memory_limit
from services.store.db import forget_inherited_engines

from services.jobs.stages.compile_units import CompileUnit

__all__ = ["run_units", "exit_reason"]

log = logging.getLogger("fabricplan.compile_pool")
POLL_S = 0.02


@dataclass
class _Running:
    unit: CompileUnit
    pid: int
    deadline: float
    killed_for: str | None = None
    out_path: str | None = None


def exit_reason(status: int) -> str | None:
    """What a child's wait status says when it did not end normally (None: exit code 0)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name
        return (f"the compile process was killed by {name}"
                + (" (out of memory: the kernel's OOM killer, or the process was killed)" if sig == signal.SIGKILL
                   else ""))
    code = os.WEXITSTATUS(status)
    return None if code == 0 else f"the compile process ended with exit code {code}"


def run_units(units: Sequence[CompileUnit], run_one: Callable[[CompileUnit], object],
              fail_one: Callable[[CompileUnit, str], None], *, processes: int, budget_bytes: int,
              time_limit_s: float, on_done: Callable[[CompileUnit, int, int], None] | None = None,
              collect: Callable[[CompileUnit, object], None] | None = None) -> None:
    """Run every unit in a forked process (see the module docstring); returns when all have ended.
    `on_done(unit, finished, total)` runs in the parent after each; `collect(unit, value)` with what `run_one`
    returned in the child."""
    queue = list(units)
    running: list[_Running] = []
    finished = 0
    try:
        while queue or running:
            while queue and len(running) < max(1, processes):
                u = queue[0]
                held = sum(r.unit.estimated_bytes for r in running)
                if running and (u.estimated_bytes > budget_bytes or held + u.estimated_bytes > budget_bytes):
                    break                   # waits for room (a unit above the budget waits to run alone)
                queue.pop(0)
                out_path = _out_file() if collect is not None else None
                running.append(_Running(u, _fork(u, run_one, budget_bytes, out_path),
                                        time.monotonic() + time_limit_s, out_path=out_path))
            time.sleep(POLL_S)
            for r in list(running):
                pid, status = os.waitpid(r.pid, os.WNOHANG)
                if pid == 0:
                    if r.killed_for is None and time.monotonic() > r.deadline:
                        r.killed_for = (f"the compile process exceeded the time limit of {time_limit_s:g} s "
                                        "(FABRICPLAN_COMPILE_UNIT_TIME_LIMIT_S) and was killed")
                        _kill(r.pid)
                    continue
                running.remove(r)
                why = r.killed_for or exit_reason(status)
                if why is not None:
                    fail_one(r.unit, why)
                elif collect is not None:
                    collect(r.unit, _read_out(r.out_path))
                _remove(r.out_path)
                finished += 1
                if on_done is not None:
                    on_done(r.unit, finished, len(units))
    finally:                                # the caller was stopped (its time limit): no orphan compiles
        for r in running:
            _kill(r.pid)
            os.waitpid(r.pid, 0)
            _remove(r.out_path)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _out_file() -> str:
    fd, path = tempfile.mkstemp(prefix="fabricplan-compile-", suffix=".pickle")
    os.close(fd)
    return path


def _read_out(path: str) -> object:
    with open(path, "rb") as f:
        return pickle.load(f)


def _remove(path: str | None) -> None:
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _fork(unit: CompileUnit, run_one: Callable[[CompileUnit], object], budget_bytes: int,
          out_path: str | None = None) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:                                    # the child: its own database connections, the budget as its cap
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        forget_inherited_engines()
        apply_memory_limit(max(1, budget_bytes >> 20))
        value = run_one(unit)
        if out_path is not None:
            with open(out_path, "wb") as f:
                pickle.dump(value, f)
        code = 0
    except BaseException:
        log.exception("compile unit %s failed", unit.label)
    finally:
        os._exit(code)
