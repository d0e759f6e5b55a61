"""The scaled deployment: a separate `fabricplan worker` process on the Redis broker and PostgreSQL.
Includes the BFB fan-out (a Celery group of receiver blocks merged by a chord) and worker crashes."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.store import repo
from services.store.db import session_scope

from services.synthesis.topology.catalog import build

from tests.conftest import (HANG_S, MINIMAL, PG_URL, REDIS_PREFIX, REDIS_URL, clear_redis, fresh_postgres_url,
                            unique_job, wait_done)
from tests.api.test_revision_sets import check_set_xml

pytestmark = pytest.mark.skipif(not (PG_URL and REDIS_URL),
                                reason="needs PostgreSQL and Redis (scripts/dev test finds or starts them)")
ROOT = Path(__file__).resolve().parents[2]


def _redis_db() -> int:
    """A database away from 0 (a developer's own); runs share it, each under its own key prefix."""
    return 10 + int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 5


@pytest.fixture
def scaled(request, monkeypatch, tmp_path):
    """Environment of the scaled deployment: PostgreSQL database, Redis broker/backend whose keys carry this
    checkout's and worker's prefix (deleted before and after the test; nobody else's keys are touched)."""
    from services.config import Settings, get_settings
    from services.store.db import migrate
    from workers.app import celery_app, configure

    db = fresh_postgres_url("e2e", migrated=True)
    n = _redis_db()
    clear_redis(f"{REDIS_URL}/{n}")
    env = {"FABRICPLAN_DATABASE_URL": db, "FABRICPLAN_BROKER_URL": f"{REDIS_URL}/{n}",
           "FABRICPLAN_RESULT_BACKEND": f"{REDIS_URL}/{n}", "FABRICPLAN_REDIS_KEY_PREFIX": REDIS_PREFIX,
           "FABRICPLAN_DATA_DIR": str(tmp_path),
           "FABRICPLAN_BFB_FANOUT_MIN_NODES": "48", "FABRICPLAN_BFB_FANOUT_BLOCKS": "4",
           "FABRICPLAN_STALE_PLAN_S": str(getattr(request.node.get_closest_marker("stale_s"), "args", [120])[0]),
           "FABRICPLAN_MAX_ATTEMPTS": str(getattr(request.node.get_closest_marker("max_attempts"), "args", [3])[0]),
           "FABRICPLAN_SWEEP_S": "0.5"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    get_settings.cache_clear()
    st = Settings()
    migrate(db)
    configure(celery_app, st)
    yield st, {**os.environ, **env}
    get_settings.cache_clear()
    configure(celery_app, get_settings())
    clear_redis(f"{REDIS_URL}/{n}")


def start_worker(env: dict, tmp_path: Path, name: str, held: Path | None = None, *args: str) -> subprocess.Popen:
    """`fabricplan worker [args]`; with `held`, tests.held_worker's: the first schedule stage run by any worker
    given this marker path stops there (the marker then holds its pool process's pid) until killed."""
    log = open(tmp_path / f"{name}.log", "w")
    module, extra = ("services.cli", {}) if held is None else ("tests.held_worker", {"HELD_WORKER_MARKER": str(held)})
    proc = subprocess.Popen([sys.executable, "-m", module, "worker", "--concurrency", "1",
                             "--hostname", f"{name}@%h", "--log-level", "warning", *args],
                            cwd=ROOT, env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=HANG_S)


def children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


@pytest.fixture
def api(scaled):
    from fastapi.testclient import TestClient

    from services.api.app import create_app

    st, env = scaled
    with TestClient(create_app(st)) as c:
        yield c, st, env


def test_every_redis_key_carries_this_runs_prefix(scaled):
    """A queued message and a stored result land under REDIS_PREFIX (the setting redis_key_prefix), so runs
    sharing one Redis database never see, or delete, each other's keys."""
    import uuid

    from redis import Redis

    from workers.app import celery_app

    st, _ = scaled
    task_id = uuid.uuid4().hex
    celery_app.send_task("fabricplan.prefix-probe", task_id=task_id, queue="prefix-probe")
    celery_app.backend.store_result(task_id, {"probe": 1}, "SUCCESS")
    r = Redis.from_url(st.broker_url)
    try:
        ours = {k.decode() for k in r.scan_iter(match=REDIS_PREFIX + "*")}
        assert REDIS_PREFIX + "prefix-probe" in ours, ours
        assert REDIS_PREFIX + f"celery-task-meta-{task_id}" in ours, ours
        assert not r.exists("prefix-probe", f"celery-task-meta-{task_id}")
    finally:
        r.close()


def test_worker_process_completes_a_plan(api, tmp_path):
    client, st, env = api
    assert not st.embedded
    worker = start_worker(env, tmp_path, "w1")
    try:
        assert client.get("/readyz").json()["checks"]["broker"] == "ok"
        r = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()})
        p = wait_done(client, r.json()["id"])
        assert p["status"] == "done", (p["reason"], (tmp_path / "w1.log").read_text()[-3000:])
        assert p["schedules"]["allreduce"]["verified"]
        # the compile stage ran as a chord of one task per file, ranges of the schedule sets included
        check_set_xml(client, p, build(p["topology"]["expr"]))
        events = [e["message"] or "" for e in client.get(f"/v1/plans/{p['id']}/events").json()]
        assert any(re.match(r"compiled \d+ of \d+ XML files", m) for m in events), events
        # a failure report: its revision goes through the outbox to the worker like a plan
        t, h, _ = next(a for a in client.get(f"/v1/plans/{p['id']}/topology").json()["arcs"] if a[0] != a[1])
        url = client.post(f"/v1/plans/{p['id']}/failures", json={"links": [{"arc": f"{t}>{h}"}]}).json()["url"]
        deadline = time.monotonic() + HANG_S
        while (rev := client.get(url).json())["status"] not in ("done", "failed") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert rev["status"] == "done", (rev["reason"], (tmp_path / "w1.log").read_text()[-3000:])
        assert rev["schedules"]["allreduce"]["verified"] and client.get(f"/v1/plans/{p['id']}").json()[
            "revision"]["current"] == 1
        check_set_xml(client, rev, build(rev["expr"]))          # the fork pool in a Celery pool process
    finally:
        stop(worker)


def test_the_worker_serves_what_its_processes_observe(api, tmp_path):
    """`fabricplan worker --metrics-port`: the plan's duration, its stages' and its compiles', observed by the
    worker's pool process and the compile processes it forks, on the worker's port; the files of the compile
    processes that ended folded at the scrape."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from tests.served import free_port

    client, st, env = api
    port = free_port()
    worker = start_worker(env, tmp_path, "wm", None, "--metrics-port", str(port))

    def scrape() -> dict:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        except httpx.TransportError:                 # not listening yet
            return {}
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    plan = ("fabricplan_job_duration_seconds_count", (("kind", "plan"), ("status", "done")))
    try:
        p = wait_done(client, client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"])
        assert p["status"] == "done", (p["reason"], (tmp_path / "wm.log").read_text()[-3000:])
        deadline = time.monotonic() + HANG_S
        while (found := scrape()).get(plan) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert found.get(plan) == 1, (tmp_path / "wm.log").read_text()[-3000:]
        assert found[("fabricplan_plan_stage_duration_seconds_count", (("stage", "frontier"),))] == 1
        compiled = sum(v for (name, labels), v in found.items()
                       if name == "fabricplan_compile_duration_seconds_count" and ("status", "done") in labels)
        assert compiled >= 1, found
        files = sorted(f.name for f in (tmp_path / "prometheus-worker").glob("*.db"))
        assert len(files) <= 6, files        # the main and the pool process's, and the archives
    finally:
        stop(worker)


def test_large_bfb_fans_out_as_a_chord(api, tmp_path):
    """N = 64 with a latency-bound workload selects a non-vertex-transitive BFB topology (de Bruijn /
    generalized Kautz); with the fan-out threshold at 48 nodes its LP blocks run as a group + chord."""
    client, st, env = api
    workers = [start_worker(env, tmp_path, f"w{i}") for i in range(2)]
    try:
        body = {**MINIMAL, "job_id": unique_job(), "nodes": 64, "workload": {"collective": "allreduce",
                                                                             "sizes_bytes": [1024]}}
        p = wait_done(client, client.post("/v1/plans", json=body).json()["id"])
        assert p["status"] == "done", p["reason"]
        assert p["topology"]["steps"] == 3
        events = client.get(f"/v1/plans/{p['id']}/events").json()
        solved = [e for e in events if e["message"] and e["message"].startswith("solved receivers")]
        assert len(solved) >= 4, [e["message"] for e in events]          # one per block and orientation
        with session_scope(st.sqlalchemy_url) as s:
            blocks = s.execute(__import__("sqlalchemy").text(
                "SELECT count(*) FROM artifacts WHERE kind = 'bfb-block'")).scalar()
        assert blocks >= 4
    finally:
        for w in workers:
            stop(w)


def _held_plan(client, worker: subprocess.Popen, marker: Path) -> tuple[str, int]:
    """A plan (N = 16, allreduce, oneCCL's XML only) whose schedule stage the held worker stops in: returns
    the plan's id and the pid of the pool process holding it, once the API shows it running that stage."""
    body = {**MINIMAL, "job_id": unique_job(), "runtimes": ["oneccl"],
            "workload": {"collective": "allreduce", "sizes_bytes": [1 << 30]}}
    pid = client.post("/v1/plans", json=body).json()["id"]
    deadline = time.monotonic() + 120
    while not (marker.exists() and marker.read_text()):
        assert worker.poll() is None and time.monotonic() < deadline, "the worker never reached the schedule stage"
        time.sleep(0.05)
    p = client.get(f"/v1/plans/{pid}").json()
    assert p["status"] == "running" and p["progress"]["stage"] == "schedule", p
    return pid, int(marker.read_text())


def test_killed_worker_process_is_redelivered_and_the_plan_finishes(api, tmp_path):
    """SIGKILL the pool process in the middle of building schedules (held there by tests.held_worker): the task
    is run again (acks_late, JobTask.retry_on_worker_lost), a fresh pool process repeats the stage, and the plan
    finishes with intact artifacts."""
    client, st, env = api
    worker = start_worker(env, tmp_path, "crash", held=tmp_path / "held")
    try:
        pid, holder = _held_plan(client, worker, tmp_path / "held")
        kids = children(worker.pid)
        assert holder in kids, ("the held task is not in the worker's pool process", holder, kids)
        for k in kids:
            os.kill(k, signal.SIGKILL)
        p = wait_done(client, pid)
        assert p["status"] == "done", (p["reason"], (tmp_path / "crash.log").read_text()[-3000:])
        events = client.get(f"/v1/plans/{pid}/events").json()
        assert sum(e["stage"] == "schedule" for e in events) >= 2          # the stage ran again
        with session_scope(st.sqlalchemy_url) as s:
            plan = repo.get_plan(s, pid)
            names = sorted(a.name for a in plan.artifacts)
            assert len(names) == len(set(names)), names                  # the redelivery attached nothing twice
            ranges = {n for n in names if "@" in n}                        # the schedule sets' ranges (size_sets)
            assert set(names) - ranges == {"schedule:allgather", "schedule:reducescatter", "schedule:allreduce",
                                           "topology", "topology:graphml", "loads:allgather",
                                           "loads:reducescatter", "loads:allreduce"}
            assert all(re.fullmatch(r"schedule:(allgather|reducescatter|allreduce)@\d+", n) for n in ranges), ranges
        blob = client.get(f"/v1/plans/{pid}/schedules/allreduce", params={"format": "npz"})
        assert blob.status_code == 200
    finally:
        stop(worker)


def _events(client, pid):
    return [e["message"] or "" for e in client.get(f"/v1/plans/{pid}/events").json()]


@pytest.mark.stale_s(4)
def test_dead_worker_is_found_by_heartbeat_and_the_plan_redelivered(api, tmp_path):
    """Kill the whole worker (no other worker left to take the message): within seconds its plan's
    heartbeat is stale, the plan goes back to the outbox for its next attempt, and a new worker finishes it
    (the first delivery's message, redelivered by the broker much later, would find itself superseded)."""
    client, st, env = api
    worker = start_worker(env, tmp_path, "dead", held=tmp_path / "held")
    pid, _ = _held_plan(client, worker, tmp_path / "held")
    stop(worker)
    t0 = time.monotonic()
    while not any("worker lost" in m for m in _events(client, pid)):
        assert time.monotonic() - t0 < HANG_S, _events(client, pid)
        time.sleep(0.5)
    assert client.get(f"/v1/plans/{pid}").json()["status"] in ("queued", "running")
    worker = start_worker(env, tmp_path, "rescue")
    try:
        p = wait_done(client, pid)
        assert p["status"] == "done", (p["reason"], (tmp_path / "rescue.log").read_text()[-3000:])
        with session_scope(st.sqlalchemy_url) as s:
            assert repo.get_plan(s, pid).attempts == 2
    finally:
        stop(worker)


@pytest.mark.stale_s(4)
@pytest.mark.max_attempts(1)
def test_dead_worker_fails_the_plan_with_a_reason_once_attempts_are_used(api, tmp_path):
    client, st, env = api
    worker = start_worker(env, tmp_path, "dead", held=tmp_path / "held")
    pid, _ = _held_plan(client, worker, tmp_path / "held")
    stop(worker)
    p = wait_done(client, pid)
    assert p["status"] == "failed" and "worker lost" in p["reason"]
    assert p["schedules"] is None


class Forwarder:
    """A TCP relay on 127.0.0.1:port to the test Redis that can be switched off (connections refused): the
    broker as the API and the workers see it."""

    def __init__(self, target: str):
        import socket
        from urllib.parse import urlparse

        u = urlparse(target)
        self.target = (u.hostname, u.port or 6379)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = None

    def start(self):
        import socket
        import threading

        self.server = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self.server.settimeout(0.2)
        self.alive = True

        def pipe(a, b):
            try:
                while chunk := a.recv(65536):
                    b.sendall(chunk)
            except OSError:
                pass
            finally:
                for x in (a, b):
                    try:
                        x.close()
                    except OSError:
                        pass

        def accept():
            while self.alive:
                try:
                    client, _ = self.server.accept()
                except (socket.timeout, OSError):
                    continue
                upstream = socket.create_connection(self.target)
                self.conns += [client, upstream]
                threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
                threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        self.conns = []
        self.thread = threading.Thread(target=accept, daemon=True)
        self.thread.start()

    def stop(self):
        import socket

        self.alive = False
        self.thread.join(timeout=5)
        self.server.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass


def test_broker_outage_plan_is_accepted_and_dispatched_when_the_broker_is_back(scaled, tmp_path):
    """The broker is down: POST /v1/plans answers 202 at once and the plan waits in the outbox (queued, not
    sent); once the broker answers again the sweeper sends it and a worker finishes it."""
    from fastapi.testclient import TestClient

    from services.api.app import create_app
    from services.store.models import Plan

    st, env = scaled
    relay = Forwarder(REDIS_URL)
    db = f"/{_redis_db()}"
    broker = f"redis://127.0.0.1:{relay.port}{db}"
    st = st.model_copy(update={"broker_url": broker, "result_backend": f"{REDIS_URL}{db}"})
    env = {**env, "FABRICPLAN_BROKER_URL": broker}
    from workers.app import celery_app, configure

    configure(celery_app, st)
    with TestClient(create_app(st)) as client:
        r = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()})
        assert r.status_code == 202
        pid = r.json()["id"]
        time.sleep(3 * st.sweep_s)
        with session_scope(st.sqlalchemy_url) as s:
            plan = s.get(Plan, pid)
            assert plan.status == "queued" and plan.dispatched_at is None
        assert client.get("/readyz").status_code == 503
        relay.start()
        worker = start_worker(env, tmp_path, "after-outage")
        try:
            p = wait_done(client, pid)
            assert p["status"] == "done", (p["reason"], (tmp_path / "after-outage.log").read_text()[-3000:])
        finally:
            stop(worker)
            relay.stop()
