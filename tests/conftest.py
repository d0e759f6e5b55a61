"""Service test fixtures: every service test runs on the embedded backends (SQLite file, in-process worker)
and, when scripts/dev found PostgreSQL (FABRICPLAN_TEST_DATABASE_URL), on PostgreSQL too - each pytest-xdist
worker in a database of its own, created fresh as a copy of a database migrated with Alembic once per worker.

Several checkouts may test at once against one PostgreSQL and one Redis: every database is named with this
checkout's tag and the worker's id, and dropped when the worker's session ends; every Redis key the scaled
deployment writes carries the same tag (REDIS_PREFIX, the setting redis_key_prefix) and is deleted after each
test, so no run ever flushes a database another run uses."""
from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

# The suite keeps its bytecode (__pycache__, git-ignored), PYTHONDONTWRITEBYTECODE or not: without it every run
# compiles each project module again and pytest rewrites every test module's asserts again, about half of what
# collecting the suite costs.
sys.dont_write_bytecode = False

PG_URL = os.environ.get("FABRICPLAN_TEST_DATABASE_URL")
REDIS_URL = os.environ.get("FABRICPLAN_TEST_REDIS_URL")
BACKENDS = ["sqlite"] + (["postgres"] if PG_URL else [])
# Tests wait on events (a status, a notification, a process gone); a deadline only keeps a test that hangs from
# hanging the suite, so it is generous for a loaded machine and the same everywhere, never a measure of speed.
HANG_S = float(os.environ.get("FABRICPLAN_TEST_HANG_S", "300"))
# Two checkouts testing at once on one PostgreSQL server must not drop each other's databases.
CHECKOUT_TAG = hashlib.sha1(str(Path(__file__).resolve().parents[1]).encode()).hexdigest()[:6]


def _worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "gw0")


# the Redis keys of this checkout's tests on this worker (broker queues, bindings, results)
REDIS_PREFIX = f"fabricplan-test-{CHECKOUT_TAG}-{_worker_id()}:"


def clear_redis(url: str) -> int:
    """Delete this checkout's and worker's keys (REDIS_PREFIX) from the Redis database at `url`; keys of
    anyone else stay. Returns how many were deleted."""
    from redis import Redis

    r = Redis.from_url(url)
    try:
        keys = list(r.scan_iter(match=REDIS_PREFIX + "*", count=1000))
        return r.delete(*keys) if keys else 0
    finally:
        r.close()


def _own_databases(admin) -> list[str]:
    """The PostgreSQL databases this checkout's tests made on this worker (fresh_postgres_url's names)."""
    from sqlalchemy import text

    pattern = f"fabricplan\\_{CHECKOUT_TAG}\\_%\\_{_worker_id()}"
    return list(admin.execute(text("SELECT datname FROM pg_database WHERE datname LIKE :p"), {"p": pattern}).scalars())


def drop_own_databases() -> list[str]:
    """Drop every database of this checkout and worker; returns their names."""
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            names = sorted(_own_databases(c))
            for name in names:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        return names
    finally:
        admin.dispose()


def pytest_sessionfinish(session, exitstatus):
    """Each worker drops its own databases when its session ends (the xdist controller runs this after its
    workers ended: the databases named for gw0 are then gone already)."""
    if PG_URL:
        drop_own_databases()


def fresh_postgres_url(tag: str, migrated: bool = False) -> str:
    """A new database next to the test database (dropped if it existed): empty, or with `migrated` a copy of
    this worker's migrated template (CREATE DATABASE ... TEMPLATE: Alembic runs once per worker and session,
    not once per test)."""
    from sqlalchemy import create_engine, text

    name = f"fabricplan_{CHECKOUT_TAG}_{tag}_{_worker_id()}"
    template = f' TEMPLATE "{_migrated_template()}"' if migrated else ""
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        c.execute(text(f'CREATE DATABASE "{name}"{template}'))
    admin.dispose()
    return PG_URL.rsplit("/", 1)[0] + "/" + name


@functools.cache
def _migrated_template() -> str:
    """This worker's template database: created empty and migrated to head by Alembic at its first use in the
    session (so never older than the migrations), then only copied (nobody stays connected to it)."""
    from services.store.db import migrate

    url = fresh_postgres_url("template")
    migrate(url)                          # Alembic's engine has no pool: no connection stays open
    return url.rsplit("/", 1)[1]


@functools.cache
def _migrated_sqlite_template() -> bytes:
    """A SQLite file migrated to head by Alembic once per worker and session (its bytes)."""
    import tempfile

    from services.store.db import migrate

    with tempfile.TemporaryDirectory() as d:
        migrate(f"sqlite:///{d}/template.db")      # Alembic's engine has no pool: the file is closed after
        return (Path(d) / "template.db").read_bytes()


def database_url(backend: str, tmp_path, tag: str, migrated: bool = False) -> str:
    """A fresh database of the backend: empty, or with `migrated` already at head (a copy of a migrated
    template; the embedded app's startup migration then has nothing to do)."""
    if backend == "postgres":
        return fresh_postgres_url(tag, migrated)
    path = tmp_path / "fabricplan.db"
    if migrated:
        path.write_bytes(_migrated_sqlite_template())
    return f"sqlite:///{path}"


@pytest.fixture(params=BACKENDS)
def settings(request, tmp_path, monkeypatch):
    from services.config import Settings, get_settings

    url = database_url(request.param, tmp_path, "api", migrated=True)
    monkeypatch.setenv("FABRICPLAN_DATABASE_URL", url)
    monkeypatch.setenv("FABRICPLAN_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("FABRICPLAN_BROKER_URL", raising=False)
    get_settings.cache_clear()
    st = Settings()
    yield st
    get_settings.cache_clear()


@pytest.fixture
def client(settings):
    from fastapi.testclient import TestClient

    from services.api.app import create_app

    with TestClient(create_app(settings)) as c:      # the settings' database is migrated (either backend)
        yield c


MINIMAL = {"job_id": "j1", "nodes": 16, "degree": 4, "alpha_us": 10, "bandwidth_gbps": 100,
           "workload": {"collective": "allreduce", "sizes_bytes": [1048576, 104857600]}}


def wait_url(client, url: str, timeout: float = HANG_S) -> dict:
    """GET a job's URL (a plan, revision, evaluation or simulation) until its status is done or failed."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(url).json()
        if job["status"] in ("done", "failed") or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def wait_done(client, plan_id: str, timeout: float = HANG_S) -> dict:
    return wait_url(client, f"/v1/plans/{plan_id}", timeout)


def poll_xml(client, url: str, params: dict, timeout: float = HANG_S):
    """GET a compiled schedule, polling while the API answers 202 (the compile runs in a worker)."""
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(url, params=params)
        if r.status_code != 202 or time.monotonic() > deadline:
            return r
        assert r.json()["status"] in ("queued", "running") and r.headers["location"]
        time.sleep(0.05)


def evaluate(client, body: dict, timeout: float = HANG_S):
    """POST /v1/topologies/evaluate until it answers other than 202: the evaluation runs in a worker and the
    same body names the same evaluation, so asking again waits for it (never on a clock)."""
    deadline = time.monotonic() + timeout
    while True:
        r = client.post("/v1/topologies/evaluate", json=body, params={"wait": 60})
        if r.status_code != 202 or time.monotonic() > deadline:
            return r


def unique_job() -> str:
    return "job-" + uuid.uuid4().hex[:8]
