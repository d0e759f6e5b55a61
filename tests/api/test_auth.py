"""Role-based API keys (DESIGN 4.7): stored hashed; scheduler writes, viewer reads, agents only their panel."""
import pytest
from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.auth import create_key
from services.store.db import migrate, session_scope
from services.store.models import ApiKey

from tests.conftest import MINIMAL, unique_job


@pytest.fixture
def secured(settings):
    st = settings.model_copy(update={"api_keys_required": True})
    migrate(st.sqlalchemy_url)
    keys = {}
    with session_scope(st.sqlalchemy_url) as s:
        keys["scheduler"], _ = create_key(s, "sched", "scheduler")
        keys["viewer"], _ = create_key(s, "view", "viewer")
        keys["agent"], _ = create_key(s, "agent-a", "agent", "panel-a")
    with TestClient(create_app(st)) as c:
        yield c, keys, st


def h(secret):
    return {"Authorization": f"Bearer {secret}"}


def test_keys_are_stored_hashed(secured):
    c, keys, st = secured
    with session_scope(st.sqlalchemy_url) as s:
        stored = [k.key_hash for k in s.query(ApiKey)]
    assert all(secret not in stored for secret in keys.values())
    assert all(len(x) == 64 for x in stored)


def test_roles(secured):
    c, keys, _ = secured
    body = {**MINIMAL, "job_id": unique_job()}
    assert c.post("/v1/plans", json=body).status_code == 401
    assert c.post("/v1/plans", json=body, headers=h("fp_wrong")).status_code == 401
    assert c.post("/v1/plans", json=body, headers=h(keys["viewer"])).status_code == 403
    assert c.post("/v1/plans", json=body, headers=h(keys["agent"])).status_code == 403
    r = c.post("/v1/plans", json=body, headers={"X-API-Key": keys["scheduler"]})
    assert r.status_code == 202
    pid = r.json()["id"]
    assert c.get(f"/v1/plans/{pid}", headers=h(keys["viewer"])).status_code == 200
    assert c.get(f"/v1/plans/{pid}", headers=h(keys["agent"])).status_code == 403
    assert c.get(f"/v1/plans/{pid}").status_code == 401
    assert c.get("/healthz").status_code == 200          # health stays open for probes


def test_revoked_key(secured):
    c, keys, st = secured
    with session_scope(st.sqlalchemy_url) as s:
        secret, key = create_key(s, "temp", "viewer")
        kid = key.id
    assert c.get("/v1/plans", headers=h(secret)).status_code == 200
    with session_scope(st.sqlalchemy_url) as s:
        s.get(ApiKey, kid).revoked = True
    c.app.state.key_cache.items.clear()          # revocation applies within KEY_CACHE_TTL_S
    assert c.get("/v1/plans", headers=h(secret)).status_code == 401


def test_key_validation(settings):
    migrate(settings.sqlalchemy_url)
    with session_scope(settings.sqlalchemy_url) as s:
        with pytest.raises(ValueError):
            create_key(s, "x", "admin")
        with pytest.raises(ValueError):
            create_key(s, "x", "agent")                  # an agent needs its panel
        with pytest.raises(ValueError):
            create_key(s, "x", "viewer", "panel-a")


def test_idempotency_keys_belong_to_the_api_key_that_sent_them(secured):
    """Another scheduler's replay of the same Idempotency-Key makes its own plan, never gets the first
    scheduler's; the same key's replay gets its own plan back."""
    c, keys, st = secured
    with session_scope(st.sqlalchemy_url) as s:
        other, _ = create_key(s, "sched-2", "scheduler")
    body = {**MINIMAL, "job_id": unique_job()}
    idem = {"Idempotency-Key": "nightly-42"}
    first = c.post("/v1/plans", json=body, headers={**h(keys["scheduler"]), **idem})
    assert first.status_code == 202
    replay = c.post("/v1/plans", json=body, headers={**h(keys["scheduler"]), **idem})
    assert replay.status_code == 200 and replay.json()["id"] == first.json()["id"]
    theirs = c.post("/v1/plans", json=body, headers={**h(other), **idem})
    assert theirs.status_code == 202 and theirs.json()["id"] != first.json()["id"]
    clash = c.post("/v1/plans", json={**body, "job_id": unique_job()}, headers={**h(other), **idem})
    assert clash.status_code == 409 and "nightly-42" in clash.json()["detail"]


def test_metrics_need_a_key_when_keys_are_required(secured):
    c, keys, _ = secured
    r = c.get("/metrics")
    assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json"
    assert c.get("/metrics", headers=h(keys["agent"])).status_code == 403
    r = c.get("/metrics", headers=h(keys["viewer"]))
    assert r.status_code == 200 and "fabricplan_plans_created_total" in r.text
