"""Issue 24 (problem 8): worker time is a budget. Every key has a bound on its unfinished jobs (429 with
Retry-After), viewers have a small quota and hold at most `viewer_job_slots` workers, identical compile
requests coalesce into one job, and /v1/stats and /metrics count the queued jobs of every kind. Every test runs
on SQLite and PostgreSQL (the `settings` fixture)."""
from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from services.api.app import create_app
from services.api.auth import create_key
from services.store import jobs
from services.store.db import migrate, session_scope
from services.store.models import CompileJob, Evaluation, Plan

from tests.conftest import HANG_S, MINIMAL, unique_job, wait_done


def _app(settings, **update_):
    st = settings.model_copy(update=update_)
    migrate(st.sqlalchemy_url)
    return st, create_app(st)


def _hold_the_outbox(c):
    """Nothing is sent to a worker from now on: every job stays queued (the bound counts unfinished jobs)."""
    d = c.app.state.dispatcher
    d.sweep = lambda: 0
    d.wake = lambda: None


def _finish_all(st):
    with session_scope(st.sqlalchemy_url) as s:
        for model in jobs.KINDS.values():
            s.execute(update(model).where(model.status.in_(jobs.UNFINISHED)).values(status="failed"))


def _keys(st):
    with session_scope(st.sqlalchemy_url) as s:
        return {"scheduler": create_key(s, "sched", "scheduler")[0], "other": create_key(s, "sched2", "scheduler")[0],
                "viewer": create_key(s, "view", "viewer")[0], "viewer2": create_key(s, "view2", "viewer")[0]}


def _race(n, ask):
    """`ask(i)` from `n` threads released together by a barrier; their answers' status codes, in order of i."""
    statuses, barrier = [None] * n, threading.Barrier(n)

    def run(i):
        barrier.wait()
        statuses[i] = ask(i).status_code
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=HANG_S)
    return statuses


def h(secret):
    return {"Authorization": f"Bearer {secret}"}


def test_a_keys_unfinished_jobs_are_bounded(settings):
    st, app = _app(settings, max_jobs_per_key=2, viewer_max_jobs=1, api_keys_required=True)
    keys = _keys(st)
    with TestClient(app) as c:
        _hold_the_outbox(c)
        sched = h(keys["scheduler"])
        for i in range(2):
            assert c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}, headers=sched).status_code == 202
        r = c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}, headers={**sched, "Idempotency-Key": "k3"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0, r.text
        assert "at most 2 unfinished jobs" in r.json()["detail"]
        with session_scope(st.sqlalchemy_url) as s:          # the refused plan was not stored
            assert s.scalar(select(func.count()).select_from(Plan)) == 2
        # evaluations count against the same bound; another key has its own
        r = c.post("/v1/topologies/evaluate", json={"expr": "ring(5)"}, params={"wait": 0}, headers=sched)
        assert r.status_code == 429 and r.headers["retry-after"]
        assert c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()},
                      headers=h(keys["other"])).status_code == 202
        # a viewer: a small quota; asking again for the same evaluation queues nothing and is never refused
        view = h(keys["viewer"])
        r = c.post("/v1/topologies/evaluate", json={"expr": "ring(6)"}, params={"wait": 0}, headers=view)
        assert r.status_code == 202
        assert c.post("/v1/topologies/evaluate", json={"expr": "ring(6)"}, params={"wait": 0},
                      headers=view).status_code == 202
        r = c.post("/v1/topologies/evaluate", json={"expr": "ring(7)"}, params={"wait": 0}, headers=view)
        assert r.status_code == 429 and "a viewer key may have at most 1" in r.json()["detail"]
        assert c.post("/v1/topologies/evaluate", json={"expr": "ring(7)"}, params={"wait": 0},
                      headers=h(keys["viewer2"])).status_code == 202
        with session_scope(st.sqlalchemy_url) as s:
            owners = sorted(o for o, in s.execute(select(Evaluation.owner)))
            assert len(owners) == 2 and all(o.startswith("viewer:") for o in owners) and owners[0] != owners[1]
        _finish_all(st)                                      # finished jobs free the bound
        assert c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}, headers=sched).status_code == 202
        r = c.post("/v1/topologies/evaluate", json={"expr": "ring(8)"}, params={"wait": 0}, headers=view)
        assert r.status_code == 202


def test_without_keys_every_caller_is_one_anonymous_key(settings):
    st, app = _app(settings, max_jobs_per_key=1)
    with TestClient(app) as c:
        _hold_the_outbox(c)
        assert c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).status_code == 202
        r = c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()})
        assert r.status_code == 429 and r.headers["retry-after"]
        with session_scope(st.sqlalchemy_url) as s:
            assert s.scalar(select(Plan.owner)) == "scheduler:anonymous"


@pytest.fixture
def done_plan(settings):
    st, app = _app(settings)
    with TestClient(app) as c:
        p = wait_done(c, c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"])
        assert p["status"] == "done", p["reason"]
        yield c, st, p


def test_identical_compile_requests_coalesce_into_one_job(done_plan):
    c, st, p = done_plan
    _hold_the_outbox(c)
    url = f"/v1/plans/{p['id']}/schedules/allreduce"
    with session_scope(st.sqlalchemy_url) as s:
        before = s.scalar(select(func.count()).select_from(CompileJob))
    statuses = _race(8, lambda i: c.get(url, params={"format": "msccl", "channels": 2}))
    assert statuses == [202] * 8, statuses
    # every spelling of the same options is the same job: explicit defaults, and for the oneCCL format the
    # MSCCL options it does not read
    for params in ({"format": "msccl", "channels": 2, "inplace": "both", "min_bytes": 0, "proto": "Simple"},
                   {"format": "msccl", "channels": 2, "runtime": "executor", "max_bytes": 0}):
        assert c.get(url, params=params).status_code == 202
    for params in ({"format": "oneccl", "inplace": "in", "max_chunks": 8},
                   {"format": "oneccl", "inplace": "in", "max_chunks": 8, "instances": 4, "channels": 3,
                    "proto": "LL", "min_bytes": 5}):
        assert c.get(url, params=params).status_code == 202
    with session_scope(st.sqlalchemy_url) as s:
        assert s.scalar(select(func.count()).select_from(CompileJob)) == before + 2
        assert sorted(j.options for j in s.scalars(select(CompileJob).where(CompileJob.status == "queued"))) == [
            "executor;channels=2", "oneccl;inplace=in;max_chunks=8"]
    # the plan-time file (default options) answers every spelling of the defaults at once
    assert c.get(url, params={"format": "msccl", "inplace": "both", "proto": "Simple"}).status_code == 200


def test_stats_and_metrics_count_every_kind(done_plan):
    c, st, p = done_plan
    _hold_the_outbox(c)
    assert c.get("/v1/stats").json()["queue_depth"] == 0
    assert c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).status_code == 202
    assert c.post("/v1/topologies/evaluate", json={"expr": "ring(9)"}, params={"wait": 0}).status_code == 202
    assert c.get(f"/v1/plans/{p['id']}/schedules/allgather", params={"format": "msccl", "channels": 3}
                 ).status_code == 202
    t, hd, _ = next(a for a in c.get(f"/v1/plans/{p['id']}/topology").json()["arcs"] if a[0] != a[1])
    r = c.post(f"/v1/plans/{p['id']}/failures", json={"links": [{"arc": f"{t}>{hd}"}], "repair": False})
    assert r.status_code == 202, r.text
    stats = c.get("/v1/stats").json()
    assert stats["jobs"] == {kind: {"queued": 1, "running": 0} for kind in ("plan", "evaluation", "revision",
                                                                             "compile")}, stats
    assert stats["queue_depth"] == 4 and stats["plans"]["queued"] == 1
    text = c.get("/metrics").text
    for kind in ("plan", "evaluation", "revision", "compile"):
        assert f'fabricplan_jobs{{kind="{kind}",status="queued"}} 1.0' in text, text[-2000:]


def test_viewer_jobs_hold_at_most_their_worker_slots(settings):
    """The dispatcher sends a viewer's job only while fewer than viewer_job_slots viewer jobs are in the
    workers; schedulers' jobs are sent regardless."""
    st, app = _app(settings, viewer_job_slots=1, sweep_s=3600)
    sent = []
    with TestClient(app) as c:
        d = c.app.state.dispatcher
        d.wake = lambda: None
        d._send = lambda kind, job_id, resend=None: sent.append((kind, job_id)) or True
        with session_scope(st.sqlalchemy_url) as s:
            for i, owner in enumerate(["viewer:a", "viewer:b", "viewer:a", "scheduler:x"]):
                s.add(Evaluation(id=f"{i:064d}", request={"expr": f"ring({i + 3})", "collective": "allgather"},
                                 status="queued", stage="queued", attempts=0, owner=owner))
        real_sweep = type(d).sweep
        assert real_sweep(d) == 2
        assert sent == [("evaluation", f"{0:064d}"), ("evaluation", f"{3:064d}")]
        with session_scope(st.sqlalchemy_url) as s:              # the first viewer job is now in a worker
            attempt = jobs.begin_dispatch(s, "evaluation", f"{0:064d}")
            jobs.mark_dispatched(s, "evaluation", f"{0:064d}", attempt)
        sent.clear()
        real_sweep(d)
        assert ("evaluation", f"{1:064d}") not in sent and ("evaluation", f"{2:064d}") not in sent
        with session_scope(st.sqlalchemy_url) as s:              # it finished: the next viewer job goes
            s.execute(update(Evaluation).where(Evaluation.id == f"{0:064d}").values(status="done"))
        sent.clear()
        real_sweep(d)
        assert ("evaluation", f"{1:064d}") in sent and ("evaluation", f"{2:064d}") not in sent


def test_compiles_and_revisions_beyond_the_bound_store_nothing(done_plan):
    """Compile jobs and revisions are inserted under a savepoint: the bound is checked before they are."""
    c, st, p = done_plan
    _hold_the_outbox(c)
    c.app.state.settings = st.model_copy(update={"max_jobs_per_key": 1})
    url = f"/v1/plans/{p['id']}/schedules/allgather"
    assert c.get(url, params={"format": "msccl", "min_bytes": 100}).status_code == 202
    assert c.get(url, params={"format": "msccl", "min_bytes": 100}).status_code == 202     # the same job
    r = c.get(url, params={"format": "msccl", "min_bytes": 101})
    assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
    t, hd, _ = next(a for a in c.get(f"/v1/plans/{p['id']}/topology").json()["arcs"] if a[0] != a[1])
    r = c.post(f"/v1/plans/{p['id']}/failures", json={"links": [{"arc": f"{t}>{hd}"}], "repair": False})
    assert r.status_code == 429 and r.headers["retry-after"]
    with session_scope(st.sqlalchemy_url) as s:
        queued = [(j.options, j.owner) for j in s.scalars(select(CompileJob).where(CompileJob.status == "queued"))]
        assert queued == [("executor;min_bytes=100", "scheduler:anonymous")], queued
        assert jobs.counts(s)["revision"] == {"queued": 0, "running": 0}
    assert c.get(f"/v1/plans/{p['id']}/revisions").headers["x-total-count"] == "1"


def test_concurrent_plans_of_one_key_never_pass_the_bound(settings):
    """12 distinct plans of one key at once (each request its own session and connection) with a bound of 3:
    exactly 3 are accepted and stored, the rest get 429 (budget.admit counts under the owner's lock)."""
    st, app = _app(settings, max_jobs_per_key=3)
    with TestClient(app) as c:
        _hold_the_outbox(c)
        statuses = _race(12, lambda i: c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}))
        assert sorted(statuses) == [202] * 3 + [429] * 9, statuses
        with session_scope(st.sqlalchemy_url) as s:
            assert jobs.unfinished_by(s, "scheduler:anonymous") == 3
            assert s.scalar(select(func.count()).select_from(Plan)) == 3


def test_concurrent_compiles_of_one_key_never_pass_the_bound(done_plan):
    """12 on-demand compiles of distinct options at once with a bound of 3: exactly 3 jobs are queued, the
    rest get 429 (budget.room counts under the owner's lock, before the job is inserted)."""
    c, st, p = done_plan
    _hold_the_outbox(c)
    c.app.state.settings = st.model_copy(update={"max_jobs_per_key": 3})
    url = f"/v1/plans/{p['id']}/schedules/allgather"
    statuses = _race(12, lambda i: c.get(url, params={"format": "msccl", "min_bytes": 200 + i}))
    assert sorted(statuses) == [202] * 3 + [429] * 9, statuses
    with session_scope(st.sqlalchemy_url) as s:
        assert jobs.unfinished_by(s, "scheduler:anonymous") == 3
        owners = list(s.scalars(select(CompileJob.owner).where(CompileJob.status == "queued")))
        assert owners == ["scheduler:anonymous"] * 3, owners
