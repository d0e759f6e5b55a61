"""Durability (issue 24, problems 5 and 6), on SQLite and PostgreSQL: a write is answered only after it
committed - a commit that fails is a 503 with Retry-After and nothing is stored, on every route that writes -
and the embedded outbox sends again a job whose outcome could not be recorded, without a restart."""
from __future__ import annotations

import sqlite3
import threading
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from services.store import repo
from services.store.db import migrate, session_scope
from services.store.models import CompileJob, Evaluation, FabricRow, Plan, PlanRevision, utcnow

from tests.conftest import MINIMAL, unique_job, wait_done

FABRIC = {"id": "d1", "layout": "planes", "hosts": 8, "ports_per_host": 2, "panel_prefix": "d1-p"}


@pytest.fixture
def failing_commits(monkeypatch):
    """`failing_commits.next()`: the next commit of a request fails as a full disk's would (the transaction
    rolled back); commits of the dispatcher and the worker are untouched."""
    real = Session.commit
    state = SimpleNamespace(armed=0, failed=0)

    def commit(self):
        if state.armed and threading.current_thread().name.startswith("AnyIO worker"):
            state.armed -= 1
            state.failed += 1
            self.rollback()
            raise OperationalError("COMMIT", {}, sqlite3.OperationalError("database or disk is full"))
        return real(self)
    monkeypatch.setattr(Session, "commit", commit)

    def arm():
        state.armed, state.failed = 1, 0
    state.next = arm
    return state


def _count(url: str, model, *where) -> int:
    with session_scope(url) as s:
        return s.scalar(select(func.count()).select_from(model).where(*where))


def assert_503(r, faults) -> None:
    assert faults.failed == 1, "the route did not commit"
    assert r.status_code == 503, r.text
    assert int(r.headers["retry-after"]) > 0 and r.json()["detail"]


def test_every_write_answers_503_and_stores_nothing_when_its_commit_fails(client, settings, failing_commits):
    url, faults = settings.sqlalchemy_url, failing_commits
    # POST /v1/fabrics
    faults.next()
    assert_503(client.post("/v1/fabrics", json=FABRIC), faults)
    assert client.get("/v1/fabrics/d1").status_code == 404 and _count(url, FabricRow) == 0
    assert client.post("/v1/fabrics", json=FABRIC).status_code == 201
    # POST /v1/plans
    body = {**MINIMAL, "nodes": 8, "degree": 2, "job_id": unique_job(), "fabric_id": "d1"}
    faults.next()
    assert_503(client.post("/v1/plans", json=body), faults)
    assert _count(url, Plan, Plan.job_id == body["job_id"]) == 0
    plan = wait_done(client, client.post("/v1/plans", json=body).json()["id"])
    assert plan["status"] == "done", plan["reason"]
    pid, panels = plan["id"], plan["fabric"]["panels"]
    # PUT /v1/panels/{panel}/state
    panel, version = sorted(panels.items())[0]
    faults.next()
    assert_503(client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "applied"}),
               faults)
    cfg = client.get(f"/v1/panels/{panel}/config").json()
    assert cfg["reported_status"] is None and cfg["applied_version"] == 0
    # POST /v1/plans/{id}/failures
    arc = next(a for a in client.get(f"/v1/plans/{pid}/topology").json()["arcs"] if a[0] != a[1])
    faults.next()
    assert_503(client.post(f"/v1/plans/{pid}/failures", json={"links": [{"arc": f"{arc[0]}>{arc[1]}"}]}), faults)
    assert _count(url, PlanRevision, PlanRevision.plan_id == pid) == 0
    # GET .../schedules/{c}?format=msccl records a compile job
    before = _count(url, CompileJob, CompileJob.plan_id == pid)
    faults.next()
    assert_503(client.get(f"/v1/plans/{pid}/schedules/allreduce", params={"format": "msccl", "channels": 5}), faults)
    assert _count(url, CompileJob, CompileJob.plan_id == pid) == before
    # POST /v1/topologies/evaluate
    faults.next()
    assert_503(client.post("/v1/topologies/evaluate", json={"expr": "ring(6)"}, params={"wait": 0}), faults)
    assert _count(url, Evaluation) == 0
    # DELETE /v1/plans/{id}/fabric
    faults.next()
    assert_503(client.delete(f"/v1/plans/{pid}/fabric"), faults)
    assert client.get(f"/v1/plans/{pid}").json()["fabric"]["released"] is False
    assert set(client.get("/v1/fabrics/d1").json()["reserved"]) == set(plan["fabric"]["hosts"])
    assert client.delete(f"/v1/plans/{pid}/fabric").status_code == 200
    assert client.get("/v1/fabrics/d1").json()["reserved"] == {}


def test_a_locked_database_answers_503(client, settings):
    """Problem 10: an outside transaction holds the lock a write needs; the write waits at most the lock
    timeout and answers 503 (SQLite: the database's write lock; PostgreSQL: the fabric's row)."""
    from sqlalchemy import create_engine, text

    assert client.post("/v1/fabrics", json=FABRIC).status_code == 201
    outside = create_engine(settings.sqlalchemy_url)
    with outside.connect() as conn:
        if settings.sqlalchemy_url.startswith("sqlite"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.execute(text("SELECT id FROM fabrics WHERE id = 'd1' FOR UPDATE"))
        r = client.put("/v1/panels/d1-p0/state", json={"applied_version": 1, "status": "applied"})
        conn.rollback()                         # held until the write answered: it gave up waiting for the lock
    outside.dispose()
    assert r.status_code == 503 and r.headers["retry-after"], r.text
    assert client.put("/v1/panels/d1-p0/state", json={"applied_version": 1, "status": "applied"}).status_code == 200


# ----- the embedded outbox --------------------------------------------------------------------------------
def _sent_plan(url: str, **values) -> str:
    """A plan as a full disk leaves it: sent to the embedded worker (attempt 1) whose job process ended
    without recording anything more (`values`: e.g. running at a stage)."""
    with session_scope(url) as s:
        plan, _ = repo.create_plan(s, {**MINIMAL, "nodes": 8, "degree": 2, "job_id": unique_job()}, None)
        s.flush()
        s.execute(update(Plan).where(Plan.id == plan.id).values(attempts=1, dispatched_at=utcnow(), **values))
        return plan.id


@pytest.fixture
def patient(settings):
    """The embedded service with a lost-worker limit far beyond the test: only `held` can redeliver."""
    from services.api.app import create_app

    st = settings.model_copy(update={"stale_plan_s": 600, "sweep_s": 0.5})
    migrate(st.sqlalchemy_url)
    with TestClient(create_app(st)) as c:
        yield c, st.sqlalchemy_url


def test_a_sent_job_whose_outcome_was_not_recorded_is_sent_again(patient):
    """Problem 6: a plan dispatched while the disk was full - queued and sent, its job process gone - is sent
    again by the running service (no restart) and finishes."""
    client, url = patient
    pid = _sent_plan(url)
    p = wait_done(client, pid)
    assert p["status"] == "done", p
    with session_scope(url) as s:
        assert repo.get_plan(s, pid).attempts >= 2


def test_a_running_job_whose_process_ended_is_delivered_again_at_once(patient):
    """A plan left `running` by a job process that ended without recording its outcome (its heartbeat
    fresh) is lost at once - not after the lost-worker limit - and delivered again."""
    client, url = patient
    pid = _sent_plan(url, status="running", stage="frontier", heartbeat_at=utcnow())
    p = wait_done(client, pid)
    assert p["status"] == "done", p
    events = [e["message"] or "" for e in client.get(f"/v1/plans/{pid}/events").json()]
    assert any("ended without recording an outcome" in m for m in events), events


def test_a_failure_the_database_refused_is_recorded_once_it_answers(settings, monkeypatch):
    """A job process killed while the database refused writes: its failure stays held (never sent again)
    and is recorded on a later loop of the worker, once the database takes it."""
    from services.jobs.stages import attempts
    from workers.embedded import EmbeddedWorker, _Job

    url = settings.sqlalchemy_url
    migrate(url)
    pid = _sent_plan(url, status="running", stage="schedules", heartbeat_at=utcnow())
    real, calls = attempts.fail, []

    def fail_job(*args, **kw):
        calls.append(args)
        if len(calls) <= 2:
            raise OperationalError("UPDATE plans", {}, sqlite3.OperationalError("database or disk is full"))
        return real(*args, **kw)
    monkeypatch.setattr(attempts, "fail", fail_job)
    worker = EmbeddedWorker(settings, lambda c, k: None)
    job = _Job("plan", pid, 1, process=SimpleNamespace(exitcode=-9), conn=SimpleNamespace(close=lambda: None),
               task="fabricplan.schedules", killed_for="stage 'schedules' exceeded the time limit of 1 s")
    worker.running.append(job)
    worker._finished(job)
    assert ("plan", pid) in worker.held() and len(calls) == 1
    worker._record_failures()
    assert ("plan", pid) in worker.held() and len(calls) == 2
    worker._record_failures()
    assert worker.held() == set()
    with session_scope(url) as s:
        p = repo.get_plan(s, pid)
        assert p.status == "failed" and "exceeded the time limit" in p.reason


def _killed(worker, pid: str, attempt: int) -> None:
    """The job process of `attempt` of the plan died of SIGKILL (not killed by the worker for a limit)."""
    from workers.embedded import _Job

    job = _Job("plan", pid, attempt, process=SimpleNamespace(exitcode=-9), conn=SimpleNamespace(close=lambda: None),
               task="fabricplan.schedules")
    worker.running.append(job)
    worker._finished(job)


def test_a_sigkilled_job_is_delivered_again_until_its_attempts_are_used(settings):
    """Embedded as scaled: a job process killed by a signal is a lost worker; the job goes back to the outbox
    (its stage ends at the last heartbeat) and fails only once `max_attempts` workers were lost."""
    from workers.embedded import EmbeddedWorker

    url = settings.sqlalchemy_url
    migrate(url)
    st = settings.model_copy(update={"max_attempts": 2})
    worker = EmbeddedWorker(st, lambda c, k: None)
    pid = _sent_plan(url, status="running", stage="queued")
    with session_scope(url) as s:
        repo.advance(s, pid, stage="schedules", progress=0.3, attempt=1)
        s.execute(update(Plan).where(Plan.id == pid).values(heartbeat_at=utcnow()))
    _killed(worker, pid, 1)
    assert worker.held() == set()
    with session_scope(url) as s:
        p = repo.get_plan(s, pid)
        assert (p.status, p.losses, p.dispatched_at) == ("queued", 1, None), p.reason
        closing = [e for e in p.events if e.stage == "schedules" and e.ended_at is not None]
        assert len(closing) == 1 and "last heartbeat" in closing[0].message
        s.execute(update(Plan).where(Plan.id == pid).values(status="running", attempts=2, dispatched_at=utcnow()))
    _killed(worker, pid, 2)
    with session_scope(url) as s:
        p = repo.get_plan(s, pid)
        assert p.status == "failed" and "died (signal SIGKILL" in p.reason and "lost 2 times" in p.reason


def test_a_job_whose_writes_were_refused_goes_back_to_the_outbox_without_a_loss(settings):
    """A job process that ended on a database error (SQLite locked by another writer, a full disk): the job
    is queued again, held until that is recorded, and no worker loss is counted - never a failure."""
    from workers.embedded import EmbeddedWorker, _Job

    url = settings.sqlalchemy_url
    migrate(url)
    worker = EmbeddedWorker(settings.model_copy(update={"max_attempts": 1}), lambda c, k: None)
    pid = _sent_plan(url, status="running", stage="schedules", heartbeat_at=utcnow())
    job = _Job("plan", pid, 1, process=SimpleNamespace(exitcode=1), conn=SimpleNamespace(close=lambda: None),
               task="fabricplan.schedules", database_error="OperationalError: database is locked")
    worker.running.append(job)
    worker._finished(job)
    assert worker.held() == set()
    with session_scope(url) as s:
        p = repo.get_plan(s, pid)
        assert (p.status, p.losses, p.reason) == ("queued", 0, None)


def test_a_job_reason_never_shows_sql():
    """A database error in a worker: retried as transient (OperationalError), and any reason built from a
    database error names the driver's error, not the statement or its parameters."""
    from workers.tasks import database_error, reason

    orig = sqlite3.IntegrityError("UNIQUE constraint failed: artifacts.digest")
    exc = IntegrityError("INSERT INTO artifacts (digest, data) VALUES (?, ?)", ("abc", b"secret"), orig)
    text = reason("schedules", exc)
    assert "UNIQUE constraint failed" in text and "INSERT" not in text and "secret" not in text
    away = OperationalError("UPDATE plans SET x=?", (1,), sqlite3.OperationalError("database or disk is full"))
    assert database_error(RuntimeError("wrapped")) is None
    try:
        try:
            raise away
        except OperationalError as e:
            raise RuntimeError("stage failed") from e
    except RuntimeError as wrapped:
        assert database_error(wrapped) == "OperationalError: database or disk is full"
