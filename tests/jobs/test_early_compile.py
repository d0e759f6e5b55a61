"""A plan's main XML files compiled while its schedules are checked (issue 25, services.jobs.stages.early_compile): the
compile processes hand back their outcomes and record nothing (no compile job names a file before the compile
stage records it, after the schedules are verified and attached); a stopped early compile leaves no process.
Parametrised over the embedded SQLite backend and PostgreSQL (when available)."""
from __future__ import annotations

import os
import signal
import threading
import time

from services.compiler.api import CompileOptions
from services.jobs.stages import early_compile
from services.store import compiles, repo
from services.store.db import session_scope
from services.synthesis.search.construct import construct_collectives
from services.jobs.requests.plan_spec import PlanSpec
from services.synthesis.topology.catalog import build

from tests.conftest import HANG_S, MINIMAL, unique_job


def _plan(settings) -> tuple[str, dict]:
    body = {**MINIMAL, "job_id": unique_job(), "runtimes": ["executor", "oneccl"]}
    with session_scope(settings.sqlalchemy_url) as s:
        plan, _ = repo.create_plan(s, body, None)
        return plan.id, body


def _schedules(expr: str) -> dict:
    return {c.value: b.schedule for c, b in construct_collectives(expr).items()}


def _wait_until(check, timeout: float = HANG_S):
    """check()'s value once it is truthy, or its last value when `timeout` has passed."""
    deadline = time.monotonic() + timeout
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_outcomes_come_back_and_nothing_is_recorded(settings):
    pid, body = _plan(settings)
    scheds = _schedules("torus(4, 4)")
    early_compile.start_plan(pid, PlanSpec.load(body), scheds, {c: len(s.to_bytes()) for c, s in scheds.items()},
                             build("torus(4, 4)"))
    early = early_compile.take(pid)
    assert early is not None and early_compile.take(pid) is None       # handed over once
    arrived = []
    got = early.outcomes(lambda u, o: arrived.append((u.label, o)))
    assert len(got) == 6 and dict(arrived) == got                   # 3 collectives x 2 runtimes, each reported
    assert [u.collective for u in early.units][:2] == ["allreduce", "allreduce"]     # the largest first
    with session_scope(settings.sqlalchemy_url) as s:
        for u in early.units:
            o = got[u.label]
            assert o is not None and o.reason is None and o.digest, (u.label, o)
            assert o.meta["runtime"] == u.runtime and o.meta["steps"] == scheds[u.collective].steps
            data, _ = repo.get_blob(s, o.digest)
            assert data.lstrip().startswith(b"<")                  # the file is stored ...
            assert compiles.get(s, pid, u.collective, CompileOptions(u.runtime).key()) is None   # ... named by no job
    early.reader.join(HANG_S)                            # the launcher exits once its pool is done, and is reaped
    assert _gone(early.launcher)


def _cancel_while_compiling(settings) -> None:
    """Start blocked compiles (each sleeps until killed, so none can finish first on a fast machine), wait until
    they run, `cancel`: the launcher and every compile process end, no file is handed back and no compile job
    names one."""
    pid, _ = _plan(settings)
    scheds = _schedules("torus(4, 4)")
    early = early_compile.start(pid, ["executor", "oneccl"], scheds, {c: len(s.to_bytes()) for c, s in scheds.items()},
                                lambda u, s: time.sleep(10 * HANG_S))
    compiling = _wait_until(lambda: _children(early.launcher))
    assert compiling, "the launcher started no compile process"
    stopping = threading.Thread(target=early_compile.cancel, args=(pid,), daemon=True)
    stopping.start()
    stopping.join(HANG_S)
    assert not stopping.is_alive(), "cancel did not return"
    assert _gone(early.launcher) and early_compile.take(pid) is None
    assert _wait_until(lambda: not any(_running(p) for p in compiling))
    assert all(o is None for o in early.outcomes().values())        # nothing compiled was handed back
    with session_scope(settings.sqlalchemy_url) as s:
        assert all(compiles.get(s, pid, u.collective, u.options.key()) is None for u in early.units)


def test_cancel_kills_the_compiles_and_records_nothing(settings):
    _cancel_while_compiling(settings)


def test_a_launcher_deaf_to_its_sigterm_is_killed_with_its_compiles(settings, monkeypatch):
    """The launcher does not end on its SIGTERM (here: it ignores it): after STOP_GRACE_S the stop kills its
    process group, the compiles with it, and returns."""
    real = signal.signal
    monkeypatch.setattr(signal, "signal", lambda sig, handler: real(
        sig, signal.SIG_IGN if sig == signal.SIGTERM else handler))
    monkeypatch.setattr(early_compile, "STOP_GRACE_S", 0.5)
    _cancel_while_compiling(settings)


def test_a_schedule_failing_the_model_check_stops_its_early_compile(settings, monkeypatch):
    """The schedules stage starts the early compile once its schedules are built; when one then fails the model
    checker the stage raises, the compiles are stopped, and no compile job or artifact names anything."""
    from fractions import Fraction

    from services.jobs.kinds.plan import schedules as stage
    from services.store.models import CompileJob, PlanArtifact
    from services.synthesis.schedule.verify import VerificationReport, Violation

    pid, _ = _plan(settings)
    started = []
    real_start = early_compile.start_plan
    monkeypatch.setattr(early_compile, "start_plan", lambda *a: started.append(real_start(*a)) or started[-1])
    bad = VerificationReport(False, "allgather", 16, 0, Fraction(0), 0, Violation("incomplete", "a shard is missing"))
    monkeypatch.setattr(stage, "verify", lambda *a: bad)
    try:
        stage.stage_schedules({"selected": {"expr": "torus(4, 4)"}}, pid)
    except RuntimeError as exc:
        assert "failed model checking" in str(exc)
    else:
        raise AssertionError("the stage stored a schedule that failed the model checker")
    assert len(started) == 1 and _gone(started[0].launcher) and early_compile.take(pid) is None
    with session_scope(settings.sqlalchemy_url) as s:
        assert s.query(CompileJob).filter_by(plan_id=pid).count() == 0
        assert s.query(PlanArtifact).filter_by(plan_id=pid).count() == 0


def _running(pid: int) -> bool:
    """Alive and not a zombie (a process whose parent died is reaped by init, or by nobody in a container)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except FileNotFoundError:
        return []


def test_a_killed_job_process_leaves_no_compiles(settings):
    """The job process that started the compiles dies (SIGKILL: out of memory, a hard time limit) before its
    compile stage: the launcher and its compile processes end too (services.jobs.stages.early_compile._die_with)."""
    import signal

    sched = _schedules("torus(4, 4)")["allgather"]
    r, w = os.pipe()
    job = os.fork()
    if job == 0:                                    # the job process
        try:
            os.close(r)
            early = early_compile.start("p", ["executor"], {"allgather": sched}, {"allgather": 1000},
                                        lambda u, s: time.sleep(60))
            os.write(w, f"{early.launcher}\n".encode())
            time.sleep(60)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        launcher = int(fh.readline())
    compiling = _wait_until(lambda: _children(launcher))
    assert compiling, "the launcher started no compile process"
    os.kill(job, signal.SIGKILL)
    os.waitpid(job, 0)
    assert _wait_until(lambda: not any(_running(p) for p in [launcher, *compiling]))
