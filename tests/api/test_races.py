"""Concurrent requests on one service, on SQLite and PostgreSQL (issue 24, problems 1-4): real threads released
together by a barrier, each race repeated. Every answer is 2xx or the documented 4xx (never a 5xx); a panel's
stored state is the newest report's, and `fabric_ready` holds exactly when every panel's newest report applied
the plan's version; one POST /v1/fabrics of an id gets 201, the others 409; identical plans both finish."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select

from services.store import repo
from services.store.db import session_scope
from services.store.models import Artifact, PanelConfig, PanelState

from tests.conftest import HANG_S, MINIMAL, unique_job, wait_done

SMALL = {"id": "r1", "layout": "planes", "hosts": 8, "ports_per_host": 2, "panel_prefix": "r1-p"}
PLAN = {**MINIMAL, "nodes": 8, "degree": 2, "fabric_id": "r1"}


def at_once(calls) -> list:
    """Run the callables in threads released together; their results in order."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait()
        return call()
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


@pytest.fixture
def bound(client):
    assert client.post("/v1/fabrics", json=SMALL).status_code == 201
    p = wait_done(client, client.post("/v1/plans", json={**PLAN, "job_id": unique_job()}).json()["id"])
    assert p["status"] == "done", p["reason"]
    return p


def _apply(client, panel: str, version: int, status: str = "applied", **extra):
    return client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": status, **extra})


def _ready(client, plan_id: str) -> bool:
    return client.get(f"/v1/plans/{plan_id}").json()["fabric"]["fabric_ready"]


def _new_versions(url: str, panel: str, count: int) -> list[int]:
    """`count` new config versions of the panel with its latest version's cross-connects (as a re-patch that
    moves nothing on this panel would publish)."""
    with session_scope(url) as s:
        cur = s.scalars(select(PanelConfig).where(PanelConfig.panel_id == panel)
                        .order_by(PanelConfig.version.desc())).first()
        for k in range(1, count + 1):
            s.add(PanelConfig(panel_id=panel, version=cur.version + k, connections=cur.connections, reason="test"))
        return [cur.version + k for k in range(1, count + 1)]


def test_applied_and_a_newer_failed_report_at_once_leave_the_plan_not_ready(client, settings, bound):
    """Problem 2: `applied k` and `failed k+1` at once. Whatever the order, the newest report (k+1) failed:
    the panel's row is that report's and the plan is not fabric_ready."""
    pid, panels = bound["id"], sorted(bound["fabric"]["panels"])
    for panel in panels:
        assert _apply(client, panel, bound["fabric"]["panels"][panel]).status_code == 200
    assert _ready(client, pid)
    panel = panels[0]
    for _ in range(12):
        k, k1 = _new_versions(settings.sqlalchemy_url, panel, 2)
        a, f = at_once([lambda: _apply(client, panel, k), lambda: _apply(client, panel, k1, "failed", message="jam")])
        assert f.status_code == 200, f.text
        assert a.status_code in (200, 409), a.text          # 409: it arrived after k+1 (stale)
        with session_scope(settings.sqlalchemy_url) as s:
            st = s.get(PanelState, panel)
            assert (st.reported_version, st.status, st.message) == (k1, "failed", "jam")
        assert not _ready(client, pid)
        assert _apply(client, panel, k1).status_code == 200      # repaired: ready again
        assert _ready(client, pid)


def test_the_last_panels_applying_at_once_make_the_plan_ready(client, bound):
    """Two panels' reports at once, each the last one the plan waits for: each sees the other's report
    (fabric_ready is derived under one lock per fabric), so the plan is ready."""
    pid, versions = bound["id"], bound["fabric"]["panels"]
    panels = sorted(versions)
    for _ in range(6):
        rs = at_once([lambda p=p: _apply(client, p, versions[p]) for p in panels])
        assert [r.status_code for r in rs] == [200] * len(panels), [r.text for r in rs]
        assert _ready(client, pid)
        assert sum(pid in r.json()["fabric_ready_plans"] for r in rs) == 1       # one report made it ready
        rs = at_once([lambda p=p: _apply(client, p, versions[p], "failed") for p in panels])
        assert [r.status_code for r in rs] == [200] * len(panels)
        assert not _ready(client, pid)


def test_first_reports_of_a_panel_at_once(client):
    """Problem 3: the first reports of panels with no stored state, several at once per panel: no 5xx, one
    row per panel, holding the last report accepted."""
    for trial in range(6):
        fid = f"first{trial}"
        assert client.post("/v1/fabrics", json={**SMALL, "id": fid, "panel_prefix": f"{fid}-p"}).status_code == 201
        panel = f"{fid}-p0"
        rs = at_once([lambda: _apply(client, panel, 1)] * 3 + [lambda: _apply(client, panel, 1, "failed")] * 3)
        assert all(r.status_code == 200 for r in rs), [r.text for r in rs]
        cfg = client.get(f"/v1/panels/{panel}/config").json()
        assert cfg["reported_version"] == 1 and cfg["reported_status"] in ("applied", "failed")


def test_one_fabric_id_posted_at_once_is_created_once(client):
    """Problem 4: the same fabric id POSTed by several clients at once: exactly one 201, the others 409; and
    two fabrics sharing a panel id at once: one 201, one 409."""
    for trial in range(8):
        body = {**SMALL, "id": f"dup{trial}", "panel_prefix": f"dup{trial}-p"}
        rs = at_once([lambda: client.post("/v1/fabrics", json=body)] * 4)
        codes = sorted(r.status_code for r in rs)
        assert codes == [201, 409, 409, 409], [r.text for r in rs]
        assert all(r.json()["detail"] for r in rs if r.status_code == 409)
        assert client.get(f"/v1/fabrics/dup{trial}").status_code == 200
    for trial in range(4):
        bodies = [{**SMALL, "id": f"pan{trial}{x}", "panel_prefix": f"shared{trial}-p"} for x in "ab"]
        rs = at_once([lambda b=b: client.post("/v1/fabrics", json=b) for b in bodies])
        assert sorted(r.status_code for r in rs) == [201, 409], [r.text for r in rs]
        assert sum(client.get(f"/v1/fabrics/{b['id']}").status_code == 200 for b in bodies) == 1


def test_the_same_blob_stored_by_two_transactions(settings):
    """Problem 1 at its root: two transactions store the same bytes; the second inserts while the first holds
    its uncommitted row, and finds it committed. Both succeed, one row."""
    from services.store.db import migrate

    migrate(settings.sqlalchemy_url)
    data = b"the same schedule bytes " * 100
    first_stored = threading.Event()
    release = threading.Event()
    results = []

    def first():
        with session_scope(settings.sqlalchemy_url) as s:
            results.append(repo.put_blob(s, data, "schedule", "application/octet-stream"))
            first_stored.set()
            release.wait(HANG_S)

    def second():
        first_stored.wait(HANG_S)
        with session_scope(settings.sqlalchemy_url) as s:
            results.append(repo.put_blob(s, data, "schedule", "application/octet-stream"))

    t1, t2 = threading.Thread(target=first), threading.Thread(target=second)
    t1.start(), t2.start()
    t2.join(0.5)                      # the second is waiting for the first's row (or done, on SQLite's snapshot)
    release.set()
    t1.join(HANG_S), t2.join(HANG_S)
    assert len(results) == 2 and results[0] == results[1]
    with session_scope(settings.sqlalchemy_url) as s:
        assert len(s.scalars(select(Artifact).where(Artifact.digest == results[0])).all()) == 1
        assert repo.get_blob(s, results[0])[0] == data


def test_identical_plans_at_once_both_finish(client):
    """Problem 1: identical plans sent at once store the same artifacts: both are done."""
    body = {**MINIMAL, "nodes": 12, "degree": 3, "job_id": unique_job()}
    for _ in range(2):
        rs = at_once([lambda: client.post("/v1/plans", json=body)] * 2)
        assert [r.status_code for r in rs] == [202, 202]
        plans = [wait_done(client, r.json()["id"]) for r in rs]
        assert [p["status"] for p in plans] == ["done", "done"], [p["reason"] for p in plans]
        assert plans[0]["schedules"] and plans[0]["topology"] == plans[1]["topology"]


def test_two_releases_at_once_release_once(client, bound):
    """DELETE /v1/plans/{id}/fabric twice at once: both answer 200 and the panels get one new version."""
    pid, versions = bound["id"], bound["fabric"]["panels"]
    rs = at_once([lambda: client.delete(f"/v1/plans/{pid}/fabric")] * 3)
    assert [r.status_code for r in rs] == [200] * 3, [r.text for r in rs]
    panels = {p["id"]: p["version"] for p in client.get("/v1/fabrics/r1").json()["panels"]}
    assert panels == {p: v + 1 for p, v in versions.items()}
    assert client.get("/v1/fabrics/r1").json()["reserved"] == {}


def test_identical_evaluations_at_once_are_one(client):
    """The same evaluation requested at once: one row (its id is the request's digest), no 5xx."""
    for n in (5, 7, 9):
        rs = at_once([lambda: client.post("/v1/topologies/evaluate", json={"expr": f"ring({n})"},
                                          params={"wait": 0})] * 3)
        assert all(r.status_code in (200, 202) for r in rs), [r.text for r in rs]
        assert len({r.json().get("id") for r in rs if r.status_code == 202}) <= 1


def test_failure_reports_at_once(client, bound):
    """The same failed link reported by several schedulers at once: no 5xx, one revision made (202), the
    others answered with it (200) or told to send again (409)."""
    pid = bound["id"]
    arc = next(a for a in client.get(f"/v1/plans/{pid}/topology").json()["arcs"] if a[0] != a[1])
    body = {"links": [{"arc": f"{arc[0]}>{arc[1]}"}], "repair": False}
    rs = at_once([lambda: client.post(f"/v1/plans/{pid}/failures", json=body)] * 3)
    assert all(r.status_code in (200, 202, 409) for r in rs), [r.text for r in rs]
    assert [r.json()["number"] for r in rs if r.status_code == 202] == [1], [r.text for r in rs]
