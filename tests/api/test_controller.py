"""Fabrics, plan binding and the panel-controller protocol (DESIGN 4.5-4.7)."""
from __future__ import annotations

import threading
import time

from fastapi.testclient import TestClient

from services.api.app import create_app
from services.api.auth import create_key
from services.store.db import migrate, session_scope

from tests.conftest import HANG_S, MINIMAL, unique_job, wait_done

PLANES = {"id": "f1", "layout": "planes", "hosts": 32, "ports_per_host": 4, "panel_prefix": "f1-plane"}


def bound_plan(client, nodes=16, hosts=None, fabric="f1"):
    body = {**MINIMAL, "job_id": unique_job(), "nodes": nodes, "fabric_id": fabric}
    if hosts is not None:
        body["hosts"] = hosts
    return wait_done(client, client.post("/v1/plans", json=body).json()["id"])


def test_register_fabric(client):
    r = client.post("/v1/fabrics", json=PLANES)
    assert r.status_code == 201
    f = r.json()
    assert f["hosts"] == 32 and [p["id"] for p in f["panels"]] == [f"f1-plane{k}" for k in range(4)]
    assert all(p["version"] == 1 for p in f["panels"]) and f["reserved"] == {}
    assert client.post("/v1/fabrics", json=PLANES).status_code == 409
    assert client.post("/v1/fabrics", json={**PLANES, "id": "f2"}).status_code == 409      # panel ids taken
    bad = client.post("/v1/fabrics", json={**PLANES, "id": "f3", "ports_per_host": 0})
    assert bad.status_code == 422
    bad = client.post("/v1/fabrics", json={"id": "f4", "panels": [], "hosts": [{"id": "a", "ports": []}]})
    assert bad.status_code == 422 and bad.json()["errors"][0]["msg"]
    assert client.get("/v1/fabrics/f1").json()["id"] == "f1"
    assert client.get("/v1/fabrics/nope").status_code == 404


def test_plan_binds_hosts_ports_and_panel_configs(client):
    client.post("/v1/fabrics", json=PLANES)
    p = bound_plan(client)
    assert p["status"] == "done", p["reason"]
    fab = p["fabric"]
    assert fab["fabric_id"] == "f1" and len(fab["hosts"]) == 16 and fab["fabric_ready"] is False
    assert set(fab["panels"]) == {f"f1-plane{k}" for k in range(4)}
    total = 0
    for panel, version in fab["panels"].items():
        r = client.get(f"/v1/panels/{panel}/config")
        cfg = r.json()
        assert r.headers["etag"] == f'"{version}"' and cfg["version"] == version == 2
        ingress = [c["ingress"] for c in cfg["cross_connects"]]
        egress = [c["egress"] for c in cfg["cross_connects"]]
        assert len(set(ingress)) == len(ingress) and len(set(egress)) == len(egress)   # no port used twice
        assert {c["tx_host"] for c in cfg["cross_connects"]} <= set(fab["hosts"])
        assert len(cfg["diff"]["add"]) == len(cfg["cross_connects"]) and not cfg["diff"]["remove"]
        total += len(cfg["cross_connects"])
    assert total == 16 * 4                                   # every arc of the 4-regular topology, once
    assert client.get("/v1/panels/f1-plane0/config",
                      headers={"If-None-Match": '"2"'}).status_code == 304


def test_fabric_ready_only_after_every_panel_acknowledges(client):
    client.post("/v1/fabrics", json=PLANES)
    p = bound_plan(client)
    panels = sorted(p["fabric"]["panels"].items())
    for panel, version in panels[:-1]:
        cfg = client.get(f"/v1/panels/{panel}/config").json()
        r = client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "applied",
                                                          "connections": cfg["cross_connects"]})
        assert r.status_code == 200 and r.json()["fabric_ready_plans"] == []
        assert client.get(f"/v1/plans/{p['id']}").json()["fabric"]["fabric_ready"] is False
    panel, version = panels[-1]
    failed = client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "failed",
                                                          "message": "robot arm jammed"})
    assert failed.json()["fabric_ready_plans"] == []
    ok = client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "applied"})
    assert ok.json()["fabric_ready_plans"] == [p["id"]]
    plan = client.get(f"/v1/plans/{p['id']}").json()
    assert plan["fabric"]["fabric_ready"] is True
    assert any(e["stage"] == "fabric_ready" for e in client.get(f"/v1/plans/{p['id']}/events").json())
    assert client.put(f"/v1/panels/{panel}/state", json={"applied_version": 99, "status": "applied"}).status_code == 409


def test_two_plans_cannot_share_a_host_and_release_frees_them(client):
    client.post("/v1/fabrics", json=PLANES)
    a = bound_plan(client, hosts=None)
    assert a["status"] == "done"
    taken = a["fabric"]["hosts"]
    b = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job(), "fabric_id": "f1", "hosts": taken})
    assert b.status_code == 409 and taken[0] in b.text and a["id"] in b.text       # refused at the request
    c = bound_plan(client)                                   # the other 16 hosts are free
    assert c["status"] == "done" and not set(c["fabric"]["hosts"]) & set(taken)
    d = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job(), "fabric_id": "f1"})   # nothing left
    assert d.status_code == 409 and "free" in d.json()["errors"][0]["msg"], d.text
    before = {k: v for k, v in client.get("/v1/fabrics/f1").json()["reserved"].items()}
    assert set(before) == set(taken) | set(c["fabric"]["hosts"])
    r = client.delete(f"/v1/plans/{a['id']}/fabric")
    assert r.status_code == 200 and r.json()["released"]
    after = client.get("/v1/fabrics/f1").json()
    assert set(after["reserved"]) == set(c["fabric"]["hosts"])
    assert all(p["version"] == 4 for p in after["panels"])   # 2: plan a, 3: plan c, 4: a released
    cfg = client.get("/v1/panels/f1-plane0/config").json()
    assert {x["plan_id"] for x in cfg["cross_connects"]} == {c["id"]}
    e = bound_plan(client, hosts=taken)                     # the released hosts can be taken again
    assert e["status"] == "done", e["reason"]
    assert client.get(f"/v1/plans/{a['id']}").json()["fabric"]["released"] is True
    assert client.delete("/v1/plans/0123456789abcdef0123456789abcdef/fabric").status_code == 404


def test_diff_against_the_reported_state(client):
    client.post("/v1/fabrics", json=PLANES)
    a = bound_plan(client)
    cfg = client.get("/v1/panels/f1-plane1/config").json()
    client.put("/v1/panels/f1-plane1/state", json={"applied_version": cfg["version"], "status": "applied",
                                                    "connections": cfg["cross_connects"]})
    assert client.get("/v1/panels/f1-plane1/config").json()["diff"]["add"] == []
    client.delete(f"/v1/plans/{a['id']}/fabric")
    after = client.get("/v1/panels/f1-plane1/config").json()
    assert after["cross_connects"] == [] and len(after["diff"]["remove"]) == len(cfg["cross_connects"])


def test_long_poll_returns_when_a_new_plan_bumps_the_version(client):
    client.post("/v1/fabrics", json=PLANES)
    got = {}

    def poll():                                  # as an agent does: a 304 (nothing new in the wait) polls again
        deadline = time.monotonic() + HANG_S
        while (r := client.get("/v1/panels/f1-plane0/config", params={"wait": 20},
                               headers={"If-None-Match": '"1"'})).status_code == 304 and time.monotonic() < deadline:
            got["polls"] = got.get("polls", 0) + 1
        got.update(status=r.status_code, version=r.json()["version"])
    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)
    assert t.is_alive()                                      # nothing new yet: still waiting
    p = bound_plan(client)
    t.join(timeout=HANG_S)
    assert got["status"] == 200 and got["version"] == 2               # the bump answered the waiting poll
    assert p["status"] == "done"
    r = client.get("/v1/panels/f1-plane0/config", params={"wait": 0.3}, headers={"If-None-Match": '"2"'})
    assert r.status_code == 304


def test_agent_keys_are_bound_to_their_panel(settings):
    st = settings.model_copy(update={"api_keys_required": True})
    migrate(st.sqlalchemy_url)
    with session_scope(st.sqlalchemy_url) as s:
        sched, _ = create_key(s, "sched", "scheduler")
        agent_a, _ = create_key(s, "agent-a", "agent", "f1-plane0")
        viewer, _ = create_key(s, "viewer", "viewer")
    with TestClient(create_app(st)) as c:
        auth = {"Authorization": f"Bearer {sched}"}
        assert c.post("/v1/fabrics", json=PLANES, headers=auth).status_code == 201
        assert c.post("/v1/fabrics", json={**PLANES, "id": "x"}, headers={"X-API-Key": agent_a}).status_code == 403
        a = {"X-API-Key": agent_a}
        assert c.get("/v1/panels/f1-plane0/config", headers=a).status_code == 200
        assert c.get("/v1/panels/f1-plane1/config", headers=a).status_code == 403
        assert c.put("/v1/panels/f1-plane1/state", json={"applied_version": 1, "status": "applied"},
                     headers=a).status_code == 403
        assert c.put("/v1/panels/f1-plane0/state", json={"applied_version": 1, "status": "applied"},
                     headers=a).status_code == 200
        assert c.put("/v1/panels/f1-plane0/state", json={"applied_version": 1, "status": "applied"},
                     headers={"X-API-Key": viewer}).status_code == 403
        assert c.get("/v1/panels/f1-plane0/config", headers={"X-API-Key": viewer}).status_code == 200
        assert c.get("/v1/panels/f1-plane0/config").status_code == 401


def test_plan_request_validates_hosts(client):
    body = {**MINIMAL, "job_id": unique_job(), "hosts": ["a"] * 16}
    assert client.post("/v1/plans", json=body).status_code == 422           # hosts without a fabric
    body = {**MINIMAL, "job_id": unique_job(), "fabric_id": "f1", "hosts": ["a", "b"]}
    assert client.post("/v1/plans", json=body).status_code == 422           # wrong count
    body = {**MINIMAL, "job_id": unique_job(), "fabric_id": "nope"}
    r = client.post("/v1/plans", json=body)              # refused at the request, not by a worker
    assert r.status_code == 404 and "not registered" in r.json()["errors"][0]["msg"]


def _lost_change(settings, panel: str, reason: str) -> None:
    """A change of the panel's latest config committed without a notification (as if another process's
    notification were lost)."""
    from sqlalchemy import select

    from services.store.models import PanelConfig

    with session_scope(settings.sqlalchemy_url) as s:
        cfg = s.scalars(select(PanelConfig).where(PanelConfig.panel_id == panel)
                        .order_by(PanelConfig.version.desc())).first()
        cfg.reason = reason
        s.commit()


def _expire(client, panel: str) -> None:
    body, version, _ = client.app.state.panel_cache.items[panel]
    client.app.state.panel_cache.items[panel] = (body, version, 0.0)


def test_an_expired_config_view_is_served_while_one_read_replaces_it(client, settings):
    """Stale-while-revalidate: past CONFIG_TTL_S the cached view still answers at once (its pollers never all
    wait on the database), and the one background read brings in a change whose notification was lost."""
    client.post("/v1/fabrics", json=PLANES)
    first = client.get("/v1/panels/f1-plane0/config").json()
    _lost_change(settings, "f1-plane0", "changed elsewhere")
    assert client.get("/v1/panels/f1-plane0/config").json() == first          # fresh entry: no read
    _expire(client, "f1-plane0")
    assert client.get("/v1/panels/f1-plane0/config").json() == first          # stale entry, read started
    deadline = time.monotonic() + HANG_S
    while client.get("/v1/panels/f1-plane0/config").json()["reason"] != "changed elsewhere":
        assert time.monotonic() < deadline, "the background read never replaced the expired view"
        time.sleep(0.02)
    assert not client.app.state.panel_cache.refreshing


def test_a_failed_background_read_drops_the_view(client, monkeypatch):
    """A background read that fails (the database away) drops the expired view: the next request reads
    itself and answers what the database says, never a view older than the failure."""
    from services.api.routes import panels

    client.post("/v1/fabrics", json=PLANES)
    assert client.get("/v1/panels/f1-plane0/config").status_code == 200
    _expire(client, "f1-plane0")

    def away(url, panel_id):
        raise RuntimeError("database away")
    monkeypatch.setattr(panels, "_config", away)
    assert client.get("/v1/panels/f1-plane0/config").status_code == 200        # the stale view, once
    deadline = time.monotonic() + HANG_S
    while "f1-plane0" in client.app.state.panel_cache.items:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    monkeypatch.undo()
    assert client.get("/v1/panels/f1-plane0/config").status_code == 200
    assert "f1-plane0" in client.app.state.panel_cache.items


def test_shared_layout_takes_a_panel_prefix(client):
    """Panel ids are global: two `shared` fabrics register side by side with their own prefixes (each one
    panel '{prefix}0'); without one the second is a 409 that says what to give."""
    for fid in ("sh1", "sh2"):
        r = client.post("/v1/fabrics", json={"id": fid, "layout": "shared", "hosts": 4, "ports_per_host": 2,
                                             "panel_prefix": f"{fid}-p"})
        assert r.status_code == 201, r.text
        assert [p["id"] for p in r.json()["panels"]] == [f"{fid}-p0"]
        assert [p["id"] for p in client.get("/v1/panels", params={"fabric_id": fid}).json()] == [f"{fid}-p0"]
    assert client.post("/v1/fabrics", json={"id": "sh3", "layout": "shared", "hosts": 4,
                                            "ports_per_host": 2}).status_code == 201
    r = client.post("/v1/fabrics", json={"id": "sh4", "layout": "shared", "hosts": 4, "ports_per_host": 2})
    assert r.status_code == 409 and "panel_prefix" in r.json()["detail"]


def test_panels_with_nothing_to_hold_are_not_out_of_sync(client):
    """/v1/stats: a fabric no plan uses (no cross-connects to hold, none reported) adds panels, none behind."""
    before = client.get("/v1/stats").json()
    r = client.post("/v1/fabrics", json={"id": "idle-s", "layout": "shared", "hosts": 4, "ports_per_host": 2,
                                         "panel_prefix": "idle-s-"})
    assert r.status_code == 201, r.text
    after = client.get("/v1/stats").json()
    assert after["panels"] == before["panels"] + 1
    assert after["panels_out_of_sync"] == before["panels_out_of_sync"]
