"""Placement through the service: the preview (POST /v1/fabrics/{id}/placements), a plan placed by the policy
(its `placement` block), and two bindings placed at once on real threads (never one host twice), on SQLite and
PostgreSQL."""
from __future__ import annotations

from sqlalchemy import select

from services.fabric.placement import PlacementError
from services.store import fabrics, repo
from services.store.db import session_scope
from services.store.models import HostReservation
from services.synthesis.topology.catalog import build

from tests.api.test_races import at_once
from tests.conftest import MINIMAL, unique_job, wait_done

FAB = {"id": "pl1", "layout": "planes", "hosts": 24, "ports_per_host": 4, "panel_prefix": "pl1-p"}


def test_preview_then_plan_placed_by_the_policy(client):
    assert client.post("/v1/fabrics", json=FAB).status_code == 201
    r = client.post("/v1/fabrics/pl1/placements", json={"nodes": 16, "degree": 4})
    assert r.status_code == 200, r.text
    prev = r.json()
    assert prev["policy"] == "min-reconfiguration" and len(prev["hosts"]) == 16
    assert prev["expr"] == "genkautz(4, 16)" and prev["moves"] == 64 and prev["ready_estimate_s"] == 300.0
    assert prev["largest_free_after"] == 8
    body = {**MINIMAL, "job_id": unique_job(), "fabric_id": "pl1"}
    plan = wait_done(client, client.post("/v1/plans", json=body).json()["id"])
    assert plan["status"] == "done", plan.get("reason")
    placed = plan["fabric"]["placement"]
    assert placed["policy"] == "min-reconfiguration" and placed["hosts"] == plan["fabric"]["hosts"]
    assert placed["moves"] == sum(placed["moves_by_panel"].values()) > 0
    # the plan holds 16 of 24 hosts: a second job of 16 does not fit now (409), one of 8 does
    assert client.post("/v1/fabrics/pl1/placements", json={"nodes": 16, "degree": 4}).status_code == 409
    small = client.post("/v1/fabrics/pl1/placements", json={"nodes": 8, "degree": 4}).json()
    assert not set(small["hosts"]) & set(plan["fabric"]["hosts"])


def test_preview_refusals(client):
    assert client.post("/v1/fabrics", json=FAB).status_code == 201
    assert client.post("/v1/fabrics/nope/placements", json={"nodes": 4, "degree": 2}).status_code == 404
    for bad in ({"nodes": 4, "degree": 2, "expr": "ring(5)"}, {"nodes": 4, "degree": 2, "expr": "ring("},
                {"nodes": 1, "degree": 2}, {"nodes": 4, "degree": 2, "extra": 1},
                {"nodes": 16384, "degree": 64}, {"nodes": 4, "degree": 8}):
        r = client.post("/v1/fabrics/pl1/placements", json=bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["errors"][0]["msg"]


def test_two_plans_placed_at_once_never_share_a_host(client, settings):
    assert client.post("/v1/fabrics", json=FAB).status_code == 201
    url = settings.sqlalchemy_url
    ids = []
    with session_scope(url) as s:
        for _ in range(3):
            plan, _ = repo.create_plan(s, {**MINIMAL, "job_id": unique_job(), "fabric_id": "pl1"}, None)
            ids.append(plan.id)
    topo = build("genkautz(4, 8)")

    def bind(plan_id):
        def call():
            try:
                with session_scope(url) as s:
                    return fabrics.bind_plan(s, plan_id, "pl1", topo, None).assignment["hosts"]
            except PlacementError as e:
                return e
        return call
    results = at_once([bind(p) for p in ids])
    hosts = [h for r in results if isinstance(r, list) for h in r]
    assert len(hosts) == len(set(hosts)) == 24            # three jobs of 8 fill the 24 hosts, none twice
    with session_scope(url) as s:
        held = s.scalars(select(HostReservation.host_id).where(HostReservation.fabric_id == "pl1")).all()
    assert sorted(held) == sorted(hosts)
