"""Request bodies are authenticated and bounded before they are read whole, and scanned and parsed off the
event loop (services.api.guard, services.api.bodies): an unauthenticated client cannot make the API read,
scan or parse megabytes, and nobody's large body stalls the event loop that answers /healthz."""
from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.testclient import TestClient

from services.api import bodies, guard
from services.api.app import create_app
from services.api.auth import create_key
from services.store.db import migrate, session_scope

from tests.conftest import MINIMAL, unique_job


@pytest.fixture
def secured(settings):
    st = settings.model_copy(update={"api_keys_required": True})
    migrate(st.sqlalchemy_url)
    with session_scope(st.sqlalchemy_url) as s:
        secret, _ = create_key(s, "sched", "scheduler")
    with TestClient(create_app(st)) as c:
        yield c, secret


def _post_unread(app, headers: list[tuple[bytes, bytes]]) -> tuple[int, int, dict]:
    """POST /v1/plans through the input guard with a body the guard may never read: (status, chunks of the
    body it read, the problem it answered)."""
    reads = {"n": 0}
    sent = []

    async def receive():
        reads["n"] += 1
        return {"type": "http.request", "body": b"{" * (1 << 20), "more_body": True}

    async def send(message):
        sent.append(message)

    async def never(scope, receive, send):          # the application behind the guard
        raise AssertionError("the request reached the application")

    scope = {"type": "http", "method": "POST", "path": "/v1/plans", "query_string": b"", "app": app,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(8 << 20).encode()),
                         *headers]}
    asyncio.run(guard.InputGuard(never)(scope, receive, send))
    body = json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
    return sent[0]["status"], reads["n"], body


def test_a_body_is_never_read_before_its_key_is_checked(secured):
    c, secret = secured
    status, reads, problem = _post_unread(c.app, [])
    assert (status, reads) == (401, 0) and problem["status"] == 401 and "API key is required" in problem["detail"]
    status, reads, _ = _post_unread(c.app, [(b"authorization", b"Bearer fp_not-a-key")])
    assert (status, reads) == (401, 0)
    status, reads, _ = _post_unread(c.app, [(b"x-api-key", b"fp_not-a-key")])
    assert (status, reads) == (401, 0)


def test_large_bodies_are_scanned_and_parsed_in_the_thread_pool(secured, monkeypatch):
    c, secret = secured
    calls = []

    def spy(module):
        real = module.run_in_threadpool

        async def run(fn, *args, **kwargs):
            calls.append((module.__name__, getattr(fn, "__name__", str(fn))))
            return await real(fn, *args, **kwargs)
        monkeypatch.setattr(module, "run_in_threadpool", run)
    spy(guard)
    spy(bodies)
    body = {**MINIMAL, "job_id": unique_job(), "workload": {"collective": "allreduce",
                                                            "sizes_bytes": [1 << 20] * 30_000}}
    r = c.post("/v1/plans", json=body, headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 422 and r.json()["field"].startswith("workload.sizes_bytes"), r.text[:300]
    assert ("services.api.guard", "_refuse_body") in calls and ("services.api.bodies", "loads") in calls, calls
    bad = b'{"job_id": "x", "nodes": ' + b" " * (100 << 10) + b"}"
    r = c.post("/v1/plans", content=bad, headers={"Authorization": f"Bearer {secret}",
                                                  "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["errors"][0]["type"] == "json_invalid", r.text[:300]
