"""Stage events, weighted progress and the ETA (issue 25): every stage of a plan and of a revision recorded in
the plan's events with its start, end and duration; progress only moves forward; a running job's progress block
carries eta_s. Parametrised over the embedded SQLite backend and PostgreSQL (when available)."""
from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.stages.stage_weights import eta_s, plan_progress, plan_stages, revision_progress
from services.store import repo, stage_events
from services.store.db import migrate, session_scope
from services.store.models import Plan, PlanEvent, utcnow

from tests.conftest import HANG_S, MINIMAL, unique_job, wait_done

PLAN_STAGES = ("frontier", "select", "schedule", "verify", "store", "compile")


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def _closed(events: list[dict]) -> dict[str, dict]:
    return {e["stage"]: e for e in events if e["ended_at"] is not None}


def test_plan_stages_are_timed_and_progress_is_monotone(client):
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    p = wait_done(client, pid)
    assert p["status"] == "done", p["reason"]
    assert p["progress"]["fraction"] == 1.0 and p["progress"].get("eta_s") is None
    events = client.get(f"/v1/plans/{pid}/events").json()
    fractions = [e["progress"] for e in events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    closed = _closed(events)
    for stage in PLAN_STAGES:
        e = closed[stage]
        started, ended = _t(e["started_at"]), _t(e["ended_at"])
        assert started <= ended and e["duration_s"] == pytest.approx((ended - started).total_seconds(), abs=1e-3)
        # the stage's start event carries the same started_at
        assert any(x["stage"] == stage and x["ended_at"] is None and x["started_at"] == e["started_at"]
                   for x in events)
    # stages follow each other: one ends when the next starts
    order = [closed[s_] for s_ in PLAN_STAGES]
    for a, b in zip(order, order[1:]):
        assert _t(a["ended_at"]) <= _t(b["started_at"]) + timedelta(milliseconds=1)
    assert _t(closed["compile"]["ended_at"]) <= _t(events[-1]["at"])


def test_revision_stages_are_timed(client):
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    p = wait_done(client, pid)
    assert p["status"] == "done", p["reason"]
    arcs = client.get(f"/v1/plans/{pid}/topology").json()["arcs"]
    t, h, _ = next(a for a in arcs if a[0] != a[1])
    r = client.post(f"/v1/plans/{pid}/failures", json={"links": [{"arc": f"{t}>{h}"}]})
    assert r.status_code == 202, r.text
    deadline, running = time.monotonic() + HANG_S, []
    while True:
        rev = client.get(r.json()["url"]).json()
        if rev["status"] == "running":
            running.append(rev["progress"])
        if rev["status"] in ("done", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert rev["status"] == "done", rev.get("reason")
    fractions = [x["fraction"] for x in running]
    assert fractions == sorted(fractions)
    assert all(x.get("eta_s") is not None and x["eta_s"] >= 0 for x in running if x["fraction"] > 0)
    n = rev["number"]
    closed = _closed(client.get(f"/v1/plans/{pid}/events").json())
    for stage in ("repair", "schedule", "verify", "compile"):
        e = closed[f"rev{n}:{stage}"]
        assert _t(e["started_at"]) <= _t(e["ended_at"]) and e["duration_s"] >= 0.0


@pytest.fixture
def store_url(settings):
    migrate(settings.sqlalchemy_url)
    return settings.sqlalchemy_url


def test_eta_while_running_and_stage_close(store_url):
    from services.api.progress import progress_block

    req = {**MINIMAL, "job_id": unique_job()}
    with session_scope(store_url) as s:
        pid = repo.create_plan(s, req, None)[0].id
    with session_scope(store_url) as s:
        assert repo.advance(s, pid, stage="frontier", progress=0.1)
    with session_scope(store_url) as s:                 # the stage started 10 s ago
        ev = s.query(PlanEvent).filter_by(plan_id=pid, stage="frontier").one()
        ev.started_at = utcnow() - timedelta(seconds=10)
    with session_scope(store_url) as s:
        out = progress_block(s, pid, "running", 0.25, "select")
        assert out["eta_s"] == pytest.approx(30.0, abs=1.0)          # 10 s (1 - 0.25) / 0.25
        assert "eta_s" not in progress_block(s, pid, "done", 1.0, "done")
        assert repo.advance(s, pid, stage="select", progress=0.25)
    with session_scope(store_url) as s:
        closing = [e for e in s.query(PlanEvent).filter_by(plan_id=pid, stage="frontier") if e.ended_at]
        assert len(closing) == 1 and closing[0].duration_s == pytest.approx(10.0, abs=1.0)
        assert repo.fail(s, pid, "boom")
    with session_scope(store_url) as s:
        failed = [e for e in s.query(PlanEvent).filter_by(plan_id=pid, stage="select") if e.ended_at]
        assert len(failed) == 1 and failed[0].message == "boom" and failed[0].status == "failed"
        assert s.get(Plan, pid).status == "failed"


def _spec(**fields) -> PlanSpec:
    return PlanSpec.load({**MINIMAL, "job_id": "weights", **fields})


def test_weights_follow_the_measured_costs():
    small, large = _spec(nodes=16), _spec(nodes=1024)
    # the compile stage's share of the measured plans (stage_weights' table: 1.26 s of 2.99 at N = 512, 4.5 of
    # 8.8-9.3 at N = 1024); at N = 16 the fixed costs weigh more
    assert 1 - plan_progress(_spec(nodes=512), False, "compile", 0.96) == pytest.approx(1.26 / 2.99, abs=0.06)
    assert 1 - plan_progress(large, False, "compile", 0.96) == pytest.approx(4.5 / 9.0, abs=0.06)
    assert plan_progress(small, False, "compile", 0.96) > 0.25
    for req in (small, large, _spec(nodes=256, runtimes=["executor", "rccl"], fabric_id="f")):
        points = [plan_progress(req, True, st, x) for st, _ in plan_stages(req, True)
                  for x in (0.0, 0.2, 0.5, 0.96, 0.99, 1.0)]
        ordered = [plan_progress(req, True, st, lo) for st, (lo) in
                   [(st, 0.0) for st, _ in plan_stages(req, True)]]
        assert all(0.0 <= x <= 1.0 for x in points) and ordered == sorted(ordered)
    # a revision at N = 1024: schedules and check 2.5 s, then 9.8 s of XML (bench.failures, quiet)
    assert revision_progress(large, "compile", 0.0) == pytest.approx(2.5 / 12.3, abs=0.05)
    assert revision_progress(large, "compile", 1.0) > 0.95
    assert eta_s(0.5, 10.0) == 10.0 and eta_s(0.0, 3.0) is None


def test_stage_events_on_their_own(store_url):
    req = {**MINIMAL, "job_id": unique_job()}
    with session_scope(store_url) as s:
        pid = repo.create_plan(s, req, None)[0].id
    with session_scope(store_url) as s:
        stage_events.record(s, pid, "queued", "rev1:schedule", status="done", progress=1.0)
        assert stage_events.close_stage(s, pid, "rev1:queued", status="done", progress=1.0) is None
        end = stage_events.close_stage(s, pid, "rev1:schedule", status="done", progress=1.0)
        assert end is not None and end.duration_s >= 0.0 and end.ended_at >= stage_events.aware(end.started_at)


def test_running_revision_serves_its_schedules_before_the_xml(client, settings):
    """A revision in its compile stage: its verified schedules (npz, JSON) are served, its XML is not yet, and
    the revision lists the files still being compiled. (The revision is run to the end, then put back into its
    compile stage with one compile job still running: the state a client sees while the worker compiles.)"""
    from services.store.models import CompileJob, PlanRevision

    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    assert wait_done(client, pid)["status"] == "done"
    arcs = client.get(f"/v1/plans/{pid}/topology").json()["arcs"]
    t, h, _ = next(a for a in arcs if a[0] != a[1])
    url = client.post(f"/v1/plans/{pid}/failures", json={"links": [{"arc": f"{t}>{h}"}]}).json()["url"]
    deadline = time.monotonic() + HANG_S
    while client.get(url).json()["status"] not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(0.05)
    done = client.get(url).json()
    assert done["status"] == "done" and done["compile_pending"] is None
    with session_scope(settings.sqlalchemy_url) as s:
        rev = s.query(PlanRevision).filter_by(plan_id=pid, number=done["number"]).one()
        rev.status, rev.stage, rev.result = "running", "compile", None
        job = s.query(CompileJob).filter_by(plan_id=pid, collective=f"rev{rev.number}:allreduce").one()
        job.status = "running"
    running = client.get(url).json()
    assert running["status"] == "running" and running["compile_pending"] == ["executor:allreduce"]
    assert running["compiled"]["executor"]["allreduce"]["status"] == "running"
    assert running["compiled"]["executor"]["allgather"]["status"] in ("done", "failed")
    for c in ("allgather", "reducescatter", "allreduce"):
        assert running["schedules"][c]["verified"] is True
        assert running["schedules"][c]["tau_exact"] == done["schedules"][c]["tau_exact"]
        npz = client.get(f"{url}/schedules/{c}", params={"format": "npz"})
        assert npz.status_code == 200 and npz.headers["content-type"] == "application/octet-stream"
        assert client.get(running["schedules"][c]["url"]).json()["steps"]
    assert client.get(f"{url}/topology").status_code == 200
    xml = client.get(f"{url}/schedules/allreduce", params={"format": "msccl"})
    assert xml.status_code == 409 and "compile" in xml.json()["detail"]
