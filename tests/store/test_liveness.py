"""Liveness by the worker, not by the job (services.store.jobs): a job whose next task waits in the queue is
never lost, a job held by a worker that beats is never lost, a job held by a worker that stopped beating is
delivered again with one more loss and fails only after `max_attempts` losses, and faults of the database
delay jobs without counting a loss. On SQLite and PostgreSQL."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import update

from services.store import jobs, repo
from services.store.db import migrate, session_scope
from services.store.models import Plan, Worker, utcnow

from tests.conftest import BACKENDS, MINIMAL, database_url, unique_job

STALE_S = 30


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    u = database_url(request.param, tmp_path, "liveness", migrated=True)
    migrate(u)
    return u


def _running(url: str, holder: str | None, beat_ago_s: float, worker_ago_s: float | None = None) -> str:
    """A plan at its schedule stage (attempt 1), its task taken by `holder` (None: released, its next task in
    the queue), the job's heartbeat `beat_ago_s` old; `worker_ago_s`: the holder's own row that old."""
    with session_scope(url) as s:
        plan, _ = repo.create_plan(s, {**MINIMAL, "job_id": unique_job()}, None)
        s.flush()
        attempt = jobs.begin_dispatch(s, "plan", plan.id)
        jobs.mark_dispatched(s, "plan", plan.id, attempt)
        jobs.take(s, "plan", plan.id, attempt, "w-first")
        repo.advance(s, plan.id, stage="schedules", progress=0.3, attempt=attempt)
        if holder is None:
            jobs.release(s, "plan", plan.id, attempt, "w-first")
        else:
            jobs.take(s, "plan", plan.id, attempt, holder)
        long_ago = utcnow() - timedelta(seconds=beat_ago_s)
        s.execute(update(Plan).where(Plan.id == plan.id).values(heartbeat_at=long_ago))
        if worker_ago_s is not None:
            jobs.beat_worker(s, holder)
            s.execute(update(Worker).where(Worker.id == holder)
                      .values(heartbeat_at=utcnow() - timedelta(seconds=worker_ago_s)))
        return plan.id


def _lost(url: str, max_attempts: int = 3, held=None):
    with session_scope(url) as s:
        return jobs.lost(s, STALE_S, max_attempts, held)


def test_a_job_waiting_in_the_queue_is_never_lost(url):
    """Its task ended 10 minutes ago and its next one waits behind other jobs: nobody holds it."""
    pid = _running(url, holder=None, beat_ago_s=600)
    assert _lost(url) == []
    with session_scope(url) as s:
        p = repo.get_plan(s, pid)
        assert (p.status, p.losses, p.attempts) == ("running", 0, 1)


def test_a_job_held_by_a_live_worker_is_never_lost(url):
    """The job's own heartbeat is old (its task waits out a retry of a database fault), but the worker that
    holds it beats: it is alive."""
    pid = _running(url, holder="w-alive", beat_ago_s=600, worker_ago_s=1)
    assert _lost(url) == []
    with session_scope(url) as s:
        assert repo.get_plan(s, pid).status == "running"


def test_a_job_held_by_a_dead_worker_is_delivered_again_then_failed(url):
    pid = _running(url, holder="w-dead", beat_ago_s=600, worker_ago_s=600)
    assert _lost(url, max_attempts=2) == [("plan", pid, None)]
    with session_scope(url) as s:
        p = repo.get_plan(s, pid)
        assert (p.status, p.losses, p.holder, p.dispatched_at, p.stage) == ("queued", 1, None, None, "queued")
        closing = [e for e in p.events if e.stage == "schedules" and e.ended_at is not None]
        assert len(closing) == 1 and closing[0].ended_at is not None
        # the stage ended at the last heartbeat, 600 s ago, not at the sweep
        assert (utcnow() - closing[0].ended_at.replace(tzinfo=utcnow().tzinfo)).total_seconds() > 500
        attempt = jobs.begin_dispatch(s, "plan", pid)
        jobs.take(s, "plan", pid, attempt, "w-dead")
        repo.advance(s, pid, stage="frontier", progress=0.1, attempt=attempt)
        s.execute(update(Plan).where(Plan.id == pid).values(heartbeat_at=utcnow() - timedelta(seconds=600)))
    [(kind, job_id, reason)] = _lost(url, max_attempts=2)
    assert (kind, job_id) == ("plan", pid) and "lost 2 times" in reason


def test_a_worker_that_never_wrote_its_row_is_dead_once_the_job_is_stale(url):
    pid = _running(url, holder="w-gone", beat_ago_s=600)
    assert _lost(url) == [("plan", pid, None)]


def test_a_released_job_whose_next_task_nobody_took_is_sent_again_without_a_loss(url):
    """The broker lost the next task's message (a restart without persistence): the outbox sends the job
    again after the resend delay, a delivery that counts no lost worker."""
    pid = _running(url, holder=None, beat_ago_s=600)
    with session_scope(url) as s:
        assert ("plan", pid) not in jobs.undispatched(s, resend_after_s=60)
        s.execute(update(Plan).where(Plan.id == pid).values(dispatched_at=utcnow() - timedelta(seconds=61)))
    with session_scope(url) as s:
        assert ("plan", pid) in jobs.undispatched(s, resend_after_s=60)
        assert jobs.begin_dispatch(s, "plan", pid, resend_after_s=60) == 2
    with session_scope(url) as s:
        p = repo.get_plan(s, pid)
        assert (p.status, p.losses) == ("queued", 0)


def test_a_held_job_is_not_sent_again(url):
    pid = _running(url, holder="w-alive", beat_ago_s=600, worker_ago_s=1)
    with session_scope(url) as s:
        s.execute(update(Plan).where(Plan.id == pid).values(dispatched_at=utcnow() - timedelta(seconds=6000)))
    with session_scope(url) as s:
        assert ("plan", pid) not in jobs.undispatched(s, resend_after_s=60)


def test_embedded_a_job_its_worker_holds_is_never_lost_for_a_late_heartbeat(url):
    """SQLite busy with other writers delays the heartbeat: the embedded worker supervises the job's process
    and still holds it, so it is not lost."""
    pid = _running(url, holder="w-embedded", beat_ago_s=600)
    assert _lost(url, held={("plan", pid)}) == []
    assert _lost(url, held=set()) == [("plan", pid, None)]


def _embedded_send(url: str, holder: str, worker_ago_s: float) -> str:
    """A plan the dispatcher of the API process `holder` (`serve --workers N`) sent to its embedded worker,
    running; that process's worker row beat `worker_ago_s` ago."""
    with session_scope(url) as s:
        plan, _ = repo.create_plan(s, {**MINIMAL, "job_id": unique_job()}, None)
        s.flush()
        attempt = jobs.begin_dispatch(s, "plan", plan.id, 2.0)
        jobs.mark_dispatched(s, "plan", plan.id, attempt, holder)
        repo.advance(s, plan.id, stage="schedules", progress=0.3, attempt=attempt)
        jobs.beat_worker(s, holder, kind="embedded")
        s.execute(update(Worker).where(Worker.id == holder)
                  .values(heartbeat_at=utcnow() - timedelta(seconds=worker_ago_s)))
        return plan.id


def test_embedded_a_job_another_live_process_runs_is_neither_lost_nor_sent_again(url):
    """`serve --workers 2`: each API process's sweep sees only its own worker's jobs in `held`; a job the other
    process runs is that process's while its worker row beats (the sweep used to count it lost at once, three
    times, and fail it)."""
    pid = _embedded_send(url, "api:other", worker_ago_s=1)
    with session_scope(url) as s:
        s.execute(update(Plan).where(Plan.id == pid).values(dispatched_at=utcnow() - timedelta(seconds=600)))
    with session_scope(url) as s:
        assert jobs.lost(s, STALE_S, 3, held=set(), me="api:me") == []
        assert ("plan", pid) not in jobs.undispatched(s, resend_after_s=2.0, held=set())
    with session_scope(url) as s:
        p = repo.get_plan(s, pid)
        assert (p.status, p.losses, p.attempts, p.holder) == ("running", 0, 1, "api:other")


def test_embedded_a_job_of_a_process_that_stopped_beating_is_lost(url):
    """The other process died (its worker row is older than the stale limit): its job is delivered again."""
    pid = _embedded_send(url, "api:gone", worker_ago_s=600)
    with session_scope(url) as s:
        assert jobs.lost(s, STALE_S, 3, held=set(), me="api:me") == [("plan", pid, None)]
    with session_scope(url) as s:
        p = repo.get_plan(s, pid)
        assert (p.status, p.losses, p.holder) == ("queued", 1, None)


def test_embedded_a_job_this_process_sent_and_no_longer_holds_is_lost_at_once(url):
    """Its own worker's job process ended without an outcome: lost at once, as before."""
    pid = _embedded_send(url, "api:me", worker_ago_s=1)
    with session_scope(url) as s:
        assert jobs.lost(s, STALE_S, 3, held=set(), me="api:me") == [("plan", pid, None)]


def test_a_task_takes_and_releases_its_job(url, monkeypatch):
    """What a worker task does around its body (workers.tasks.Heartbeats.holding): held by this worker
    process while it runs, released (handed to the queue) when it ends, whatever its outcome."""
    from services import config
    from workers.tasks import HEARTBEATS

    monkeypatch.setattr(config, "_installed", config.Settings(database_url=url, broker_url="redis://unused"))
    config.get_settings.cache_clear()
    try:
        pid = _running(url, holder=None, beat_ago_s=0)
        with pytest.raises(RuntimeError):
            with HEARTBEATS.holding("plan", pid, 1):
                with session_scope(url) as s:
                    p = repo.get_plan(s, pid)
                    assert p.holder == jobs.worker_id()
                    assert jobs.workers_alive(s, STALE_S, "celery") == 1
                HEARTBEATS.beat_once()
                raise RuntimeError("the task failed")
        with session_scope(url) as s:
            p = repo.get_plan(s, pid)
            assert p.holder is None and p.status == "running"
    finally:
        config.get_settings.cache_clear()


def test_a_sweep_after_a_database_outage_waits_before_it_looks_for_lost_workers(url, tmp_path):
    """The workers could not beat while the database was away: that is no lost worker."""
    from services.api.dispatch import Dispatcher
    from services.config import Settings

    st = Settings(database_url=url, broker_url="redis://127.0.0.1:1", stale_plan_s=STALE_S, data_dir=tmp_path)
    pid = _running(url, holder="w-was-alive", beat_ago_s=600, worker_ago_s=40)
    d = Dispatcher(st)
    d.database_ok, d.database_back_at = True, time.monotonic()     # what _run records when it answers again
    d.sweep()
    with session_scope(url) as s:
        assert repo.get_plan(s, pid).status == "running"
    d.database_back_at = time.monotonic() - STALE_S - 1
    d.sweep()
    with session_scope(url) as s:
        assert repo.get_plan(s, pid).losses == 1


def test_workers_alive_counts_only_processes_that_beat(url):
    """`serve --workers 2` with one process killed: its row stops beating and it stops counting (a gauge file
    left by a killed process counted it for ever)."""
    from services.api.metrics import DatabaseCollector

    with session_scope(url) as s:
        for name in ("api:alive", "api:killed"):
            jobs.beat_worker(s, name, kind="embedded")
        jobs.beat_worker(s, "celery:other", kind="celery")
        s.execute(update(Worker).where(Worker.id == "api:killed")
                  .values(heartbeat_at=utcnow() - timedelta(seconds=60)))
    families = {f.name: f for f in DatabaseCollector(url, None, alive_within_s=6.0).collect()}
    [sample] = families["fabricplan_workers_alive"].samples
    assert sample.value == 1
