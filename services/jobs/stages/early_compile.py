"""A plan's main XML files compiled while its schedules are model-checked and stored (the embedded
deployment's pipeline).

Once the schedules stage (services.jobs.kinds.plan.schedules) has built the allgather, reduce-scatter and allreduce
schedules, `start` compiles every main file (each runtime the plan lists, with its default options: the units
services.jobs.stages.compile_units names `c`) in forked processes (services.jobs.stages.compile_pool: the stage's
process count and memory budget, the largest schedule first) from the schedules in memory, while the stage
model-checks and stores them. A child stores only the XML bytes (a content-addressed blob that nothing names yet:
services.jobs.stages.file_compile) and hands its outcome back; nothing is recorded before the compile stage `take`s
the outcomes, after the schedules passed the model checker and were attached, and records them as the compile jobs
the plan serves (services.jobs.stages.compile_stage.stage_compile). A schedule that fails the model checker, or a
stage that raises, stops them (`cancel`): no compile job ever names their files.

The pool runs in a launcher process forked at `start` from the stage's own thread, between its transactions: a
process forked while another thread of its parent holds an SQLite transaction inherits that connection's lock
state and finds the database locked. The launcher forks the compile processes and sends each outcome back over
a pipe as it arrives; a thread of the job process reads them.

Only the embedded deployment pipelines so: there the plan's stages run one after another in one job process,
which holds the running compiles between the schedules and the compile stage. The scaled deployment compiles
in its chord after the schedules stage (workers.tasks). A compile stage that runs in another process (a
redelivery) finds nothing to take and compiles every file itself.
"""
from __future__ import annotations

import ctypes
import logging
import os
import queue
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable
from multiprocessing import Pipe
from multiprocessing.connection import Connection

from services.compiler.api import CompileOptions
from services.store.db import forget_inherited_engines
from services.synthesis.schedule.ir import Schedule

from services.config import get_settings
from services.jobs.requests import workloads
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.stages.compile_pool import run_units
from services.jobs.stages.compile_units import CompileUnit, estimate_bytes
from services.jobs.stages.file_compile import compile_file, unit_deadline

__all__ = ["Outcome", "EarlyCompiles", "start", "start_plan", "take", "cancel"]

log = logging.getLogger("fabricplan.early_compile")


@dataclass(frozen=True)
class Outcome:
    """What a compile process handed back: the stored file's digest and the job's meta, or the reason."""

    digest: str | None
    meta: dict
    reason: str | None


@dataclass
class EarlyCompiles:
    """The main files of one plan being compiled in the background (see the module docstring)."""

    units: list[CompileUnit]
    launcher: int
    arrived: queue.Queue = field(default_factory=queue.Queue)
    reader: threading.Thread | None = None

    def outcomes(self, on_each=None) -> dict[str, Outcome | None]:
        """Wait for every unit; label -> outcome, None for a unit whose process did not end normally (a unit
        the launcher never reported, stopped or lost, has no entry). `on_each(unit, outcome)` runs here as each
        arrives."""
        got: dict[str, Outcome | None] = {}
        while len(got) < len(self.units):
            item = self.arrived.get()
            if item is None:                    # the launcher's pipe closed
                break
            unit, outcome = item
            got[unit.label] = outcome
            if on_each is not None:
                on_each(unit, outcome)
        return got

    def stop(self) -> None:
        """Kill the launcher (its pool kills the compile processes) and wait for it. A launcher still there
        STOP_GRACE_S after its SIGTERM is killed with its process group (it and every compile process it
        forked: `_launcher` leads a group of its own), so a stop always ends them and never waits forever."""
        try:
            os.kill(self.launcher, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if self.reader is None:
            return
        self.reader.join(STOP_GRACE_S)
        if self.reader.is_alive():
            for kill in (os.killpg, os.kill):
                try:
                    kill(self.launcher, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.reader.join()


STOP_GRACE_S = 10.0


_PR_SET_PDEATHSIG = 1                        # linux/prctl.h
_STARTED: dict[str, EarlyCompiles] = {}
_LOCK = threading.Lock()


def start(plan_id: str, runtimes: list[str], schedules: dict[str, Schedule], blob_bytes: dict[str, int],
          compile_one: Callable[[CompileUnit, Schedule], tuple]) -> EarlyCompiles:
    """Compile the main file of every schedule in `schedules` (collective name -> schedule) for every runtime
    in `runtimes`, in the background: `compile_one(unit, schedule)` -> (digest, meta, reason) in a compile
    process (`start_plan`'s: file_compile.compile_file); `blob_bytes`: the schedule blobs' sizes (the memory
    estimate). Call it between transactions (see the module docstring)."""
    st = get_settings()
    order = sorted(schedules, key=lambda c: -schedules[c].transfers)            # the largest compile first
    units = [CompileUnit(r, c, None, CompileOptions(r), estimated_bytes=estimate_bytes(blob_bytes[c]))
             for c in order for r in runtimes]

    def run_one(u: CompileUnit) -> Outcome:         # in a compile process: the schedule is in its memory
        return Outcome(*compile_one(u, schedules[u.collective]))

    receive, send = Pipe(duplex=False)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        _launcher(receive, send, units, run_one, st, parent)
    send.close()
    early = EarlyCompiles(units, pid)
    early.reader = threading.Thread(target=_read, args=(early, receive), name=f"early-compile-{plan_id}", daemon=True)
    early.reader.start()
    with _LOCK:
        old = _STARTED.pop(plan_id, None)
        _STARTED[plan_id] = early
    if old is not None:
        old.stop()
    return early


def start_plan(plan_id: str, spec: PlanSpec, schedules: dict[str, Schedule], blob_bytes: dict[str, int],
               topology) -> EarlyCompiles:
    """`start` for a plan's main files: every runtime the plan lists, the default options, the sizes and fit
    search budget its compile jobs give them (services.jobs.stages.compile_stage.compile_job)."""
    runtimes = [r.value for r in spec.runtime_list]
    deadline = unit_deadline(len(runtimes))
    link, sizes = spec.link, workloads.message_sizes(spec)
    return start(plan_id, runtimes, schedules, blob_bytes, lambda u, sched: compile_file(
        plan_id, u.collective, sched, topology, u.options, link, sizes, deadline_s=deadline))


def _die_with(parent: int) -> None:
    """Have the kernel send this process SIGTERM when `parent` dies (Linux prctl(PR_SET_PDEATHSIG)): a job
    process killed between its schedules and compile stages (out of memory, a worker's hard time limit) leaves
    no compiles running for a plan nobody will record. Elsewhere nothing happens (`stop` and the plan's
    on_failure still end them)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:              # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _launcher(receive: Connection, send: Connection, units, run_one, st, parent: int) -> None:
    """The launcher process: the compile pool, each outcome sent as it arrives (None: the compile process did
    not end normally, the compile stage compiles that file itself). A SIGTERM ends the pool (its processes
    killed); so does the death of the job process that forked it (`_die_with`)."""
    code = 1
    try:
        os.setpgid(0, 0)                     # a group of its own: `EarlyCompiles.stop` can end it with its compiles
        receive.close()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        _die_with(parent)
        forget_inherited_engines()
        run_units(units, run_one, lambda u, why: send.send((u, None)), processes=st.compile_processes_resolved,
                  budget_bytes=st.compile_memory_budget_bytes, time_limit_s=st.compile_unit_time_limit_s,
                  collect=lambda u, outcome: send.send((u, outcome)))
        code = 0
    except BaseException:
        log.exception("early compile launcher")
    finally:
        os._exit(code)


def _read(early: EarlyCompiles, receive: Connection) -> None:
    try:
        while True:
            early.arrived.put(receive.recv())
    except (EOFError, OSError):
        pass
    finally:
        receive.close()
        os.waitpid(early.launcher, 0)
        early.arrived.put(None)


def take(plan_id: str) -> EarlyCompiles | None:
    """The plan's background compiles started in this process, handed over once (None: none)."""
    with _LOCK:
        return _STARTED.pop(plan_id, None)


def cancel(plan_id: str) -> None:
    """Stop the plan's background compiles (their processes killed); nothing of theirs is recorded."""
    early = take(plan_id)
    if early is not None:
        early.stop()
