"""A fabric-bound plan is checked against its fabric when it is requested, not by a worker a second later:
an unknown fabric (404), a degree above its ports per host, unknown hosts, more nodes than it has hosts (422),
hosts held by other plans (409). On SQLite and PostgreSQL."""
from __future__ import annotations

from sqlalchemy import func, select

from services.store.db import session_scope
from services.store.models import Plan

from tests.conftest import MINIMAL, unique_job, wait_done

FABRIC = {"id": "adm", "layout": "planes", "hosts": 8, "ports_per_host": 2, "panel_prefix": "adm-p"}


def _plan(**over) -> dict:
    return {**MINIMAL, "nodes": 4, "degree": 2, "job_id": unique_job(), "fabric_id": "adm", **over}


def _refused(client, settings, body, status: int, field: str, words: str) -> None:
    r = client.post("/v1/plans", json=body)
    assert r.status_code == status, r.text
    [err] = r.json()["errors"]
    assert err["field"] == field and words in err["msg"], err
    with session_scope(settings.sqlalchemy_url) as s:      # nothing queued for a worker to fail
        assert s.scalar(select(func.count()).select_from(Plan).where(Plan.job_id == body["job_id"])) == 0


def test_fabric_bound_plans_are_refused_at_the_request(client, settings):
    assert client.post("/v1/fabrics", json=FABRIC).status_code == 201
    _refused(client, settings, _plan(fabric_id="nope"), 404, "fabric_id", "not registered")
    _refused(client, settings, _plan(degree=3), 422, "degree", "exceeds the 2 ports per host")
    _refused(client, settings, _plan(hosts=["h0", "h1", "h2", "zz"]), 422, "hosts", "no host 'zz'")
    _refused(client, settings, _plan(nodes=16), 422, "nodes", "fabric 'adm' has only 8")
    first = client.post("/v1/plans", json=_plan(nodes=6))
    assert first.status_code == 202
    p = wait_done(client, first.json()["id"])
    assert p["status"] == "done", p["reason"]
    _refused(client, settings, _plan(nodes=4), 409, "nodes", "only 2 free hosts")
    busy = p["fabric"]["hosts"][0]
    free = sorted({f"h{i}" for i in range(8)} - set(p["fabric"]["hosts"]))
    _refused(client, settings, _plan(nodes=2, hosts=[busy, free[0]]), 409, "hosts", f"held by plan {p['id']}")
    ok = client.post("/v1/plans", json=_plan(nodes=2, hosts=free))
    assert ok.status_code == 202, ok.text


def test_unknown_query_parameters_are_refused(client):
    """A typo in a filter lists nothing silently: 422 naming the parameter and what the operation takes."""
    r = client.get("/v1/plans", params={"stauts": "done"})
    assert r.status_code == 422, r.text
    [err] = r.json()["errors"]
    assert err["field"] == "stauts" and "'stauts'" in err["msg"] and "status" in err["msg"]
    assert client.get("/v1/plans", params={"status": "done"}).status_code == 200
    assert client.get("/v1/plans", params={"limit": 5, "offset": 0}).status_code == 200     # from a dependency
    assert client.get("/healthz", params={"x": 1}).status_code == 422
    assert client.get("/v1/fabrics", params={"limit": 1}).status_code == 200
