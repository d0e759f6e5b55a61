"""Issue 10: no request takes the service down, no state is poisoned, every error has one shape.
Every test runs on SQLite and PostgreSQL (the `client` / `settings` fixtures)."""
from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from services.store import repo
from services.store.db import session_scope

from tests.conftest import HANG_S, MINIMAL, evaluate, unique_job, wait_done

PLANES = {"id": "hf", "layout": "planes", "hosts": 16, "ports_per_host": 4, "panel_prefix": "hf-plane"}


def assert_shape(r, status: int, field: str | None = None):
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["content-type"] == "application/problem+json", r.headers
    problem = r.json()
    assert problem["status"] == status and problem["title"] and problem["type"].startswith("urn:fabricplan:problem:")
    detail = problem["errors"]
    assert problem["field"] == detail[0]["field"] and problem["reason"] == detail[0]["msg"], problem
    assert detail and all({"loc", "field", "msg", "type"} <= e.keys() for e in detail), detail
    if field is not None:
        assert any(e["field"] == field or e["field"].startswith(field + ".") for e in detail), detail
    return detail


# ----- bad input: 4xx at once, in one shape ---------------------------------------------------------------
@pytest.mark.parametrize("patch,field", [
    ({"workload": {"collective": "allreduce", "sizes_bytes": [10 ** 400]}}, "workload.sizes_bytes.0"),
    ({"workload": {"collective": "allreduce", "sizes_bytes": [1 << 51]}}, "workload.sizes_bytes.0"),
    ({"workload": {"collective": "allreduce", "sizes_bytes": [1024], "weights": [1e308]}}, "workload.weights.0"),
    ({"workload": {"collective": "allreduce", "sizes_bytes": [1024], "alltoall_bytes": 10 ** 30,
                   "alltoall_weight": 1}}, "workload.alltoall_bytes"),
    ({"bandwidth_gbps": 1e-300}, "bandwidth_gbps"),
    ({"alpha_us": 1e300}, "alpha_us"),
    ({"job_id": "x" * 201}, "job_id"),
    ({"fabric_id": "f" * 101}, "fabric_id"),
])
def test_numbers_and_strings_are_bounded_up_front(client, patch, field):
    assert_shape(client.post("/v1/plans", json={**MINIMAL, **patch}), 422, field)


def test_nan_and_infinity_are_refused(client):
    for text in ('{"job_id": "j", "nodes": 16, "degree": 4, "alpha_us": NaN, "bandwidth_gbps": 100, '
                 '"workload": {"sizes_bytes": [1]}}',
                 '{"job_id": "j", "nodes": 16, "degree": 4, "alpha_us": 1, "bandwidth_gbps": Infinity, '
                 '"workload": {"sizes_bytes": [1]}}'):
        r = client.post("/v1/plans", content=text.encode(), headers={"content-type": "application/json"})
        assert r.status_code in (400, 422), r.text
        assert_shape(r, r.status_code)


def test_nul_characters_are_422_everywhere(client):
    """PostgreSQL text cannot hold NUL: refused before any query, the same on both backends."""
    assert_shape(client.post("/v1/plans", json={**MINIMAL, "job_id": "a\x00b"}), 422, "job_id")
    assert_shape(client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job(), "fabric_id": "f\x00"}),
                 422, "fabric_id")
    assert_shape(client.get("/v1/plans/abc%00def"), 422)
    assert_shape(client.get("/v1/plans/abc%00def/events"), 422)
    assert_shape(client.get("/v1/plans", params={"job_id": "j\x00"}), 422)
    assert_shape(client.get("/v1/fabrics/f%00"), 422)
    assert_shape(client.get("/v1/panels/p%00/config"), 422)
    assert_shape(client.post("/v1/fabrics", json={**PLANES, "id": "a\x00"}), 422, "id")
    assert_shape(client.post("/v1/fabrics", json={"id": "doc", "panels": [{"id": "p", "kind": "ocs", "ports": 4}],
                                                  "hosts": [{"id": "h\x00", "ports": [
                                                      {"tx": {"panel": "p", "port": 0},
                                                       "rx": {"panel": "p", "port": 0}}]}]}), 422, "hosts.0.id")
    assert_shape(client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()},
                             headers={"Idempotency-Key": "k\x00"}), 422)
    # an escaped backslash before u0000 is text, not NUL
    r = client.post("/v1/plans", json={**MINIMAL, "job_id": "a\\u0000"})
    assert r.status_code == 202


def test_every_422_has_the_field(client):
    for r in (client.post("/v1/topologies/evaluate", json={"expr": "torus(4,"}),
              client.post("/v1/topologies/evaluate", json={"nodes": 3, "edges": [[0, 1], [1, 2]]}),
              client.post("/v1/fabrics", json={**PLANES, "ports_per_host": 0}),
              client.post("/v1/plans", json={**MINIMAL, "nodes": "16"})):
        assert_shape(r, 422)


# ----- bombs: refused from their size in well under a second -------------------------------------------------
@pytest.mark.parametrize("expr", ["line(ring(2), 1000000000)", "product(torus(16,16),torus(16,16),torus(16,16))",
                                  "power(complete(64), 4)",
                                  "product(torus(8,8),torus(8,8),torus(8,8),torus(4,4))",
                                  "genkautz(62, 100000)", "complete(70)", "hypercube(11)"])
def test_evaluate_bombs_are_refused_at_once(client, expr, monkeypatch):
    """Refused in the request from the expression's size: no graph is built, no job queued."""
    from services.synthesis.topology.graph import Topology

    built = []
    real = Topology.__init__
    monkeypatch.setattr(Topology, "__init__", lambda self, *a, **kw: built.append(a[:1]) or real(self, *a, **kw))
    r = client.post("/v1/topologies/evaluate", json={"expr": expr})
    assert_shape(r, 422, "expr")
    assert built == []


def test_fabric_bombs_are_refused(client):
    r = client.post("/v1/fabrics", json={"id": "big", "layout": "planes", "hosts": 1_000_000, "ports_per_host": 64})
    assert_shape(r, 422, "hosts")
    r = client.post("/v1/fabrics", json={"id": "big", "layout": "shared", "hosts": 16384, "ports_per_host": 64})
    assert_shape(r, 422)
    assert client.get("/healthz").status_code == 200


# ----- evaluation: a worker job --------------------------------------------------------------------------
def test_evaluation_runs_in_a_worker_and_is_kept(client):
    body = {"expr": "genkautz(3, 20)", "collective": "allreduce"}
    r = client.post("/v1/topologies/evaluate", json=body, params={"wait": 0})
    assert r.status_code in (200, 202)
    if r.status_code == 202:
        url = r.json()["url"]
        assert r.headers["location"] == url
        deadline = time.monotonic() + HANG_S
        while (e := client.get(url).json())["status"] not in ("done", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert e["status"] == "done" and e["result"]["verified"], e
    again = client.post("/v1/topologies/evaluate", json=body, params={"wait": 0})
    assert again.status_code == 200 and again.json()["verified"] and again.json()["collective"] == "allreduce"
    assert client.get("/v1/topologies/evaluations/" + "0" * 64).status_code == 404


def test_degree_62_evaluates(client):
    r = evaluate(client, {"expr": "genkautz(62, 124)"})
    assert r.status_code == 200, r.text
    assert r.json()["verified"] and r.json()["steps"] == 2


# ----- fabrics: paginated ---------------------------------------------------------------------------------
def test_fabric_list_is_paginated(client):
    for i in range(3):
        assert client.post("/v1/fabrics", json={**PLANES, "id": f"pg{i}", "panel_prefix": f"pg{i}-p"}).status_code == 201
    r = client.get("/v1/fabrics", params={"limit": 2})
    assert r.headers["x-total-count"] == "3" and [f["id"] for f in r.json()] == ["pg0", "pg1"]
    assert "spec" not in r.json()[0]
    assert [f["id"] for f in client.get("/v1/fabrics", params={"limit": 2, "offset": 2}).json()] == ["pg2"]
    assert "spec" in client.get("/v1/fabrics/pg0").json()
    assert client.get("/v1/fabrics", params={"limit": 1001}).status_code == 422


# ----- panel state cannot be poisoned ---------------------------------------------------------------------
@pytest.fixture
def bound(client):
    assert client.post("/v1/fabrics", json=PLANES).status_code == 201
    p = wait_done(client, client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job(), "fabric_id": "hf"}).json()["id"])
    assert p["status"] == "done", p["reason"]
    return p


@pytest.mark.parametrize("connections", [[{"ingress": 0}], [{"ingress": 0, "egress": 1}, {"ingress": 0, "egress": 2}],
                                         [{"ingress": 0, "egress": 1}, {"ingress": 3, "egress": 1}],
                                         [{"ingress": "0", "egress": 1}], [{"ingress": 0, "egress": 16}],
                                         [{"ingress": -1, "egress": 1}], [{"ingress": 2 ** 40, "egress": 1}]])
def test_poisoned_reports_are_422_and_the_config_stays_200(client, bound, connections):
    panel, version = sorted(bound["fabric"]["panels"].items())[0]
    r = client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "failed",
                                                      "connections": connections})
    assert_shape(r, 422, "connections")
    cfg = client.get(f"/v1/panels/{panel}/config")
    assert cfg.status_code == 200 and cfg.json()["applied_version"] == 0


def test_applied_means_the_acknowledged_versions_connections(client, bound):
    pid = bound["id"]
    panels = sorted(bound["fabric"]["panels"].items())
    for panel, version in panels:
        r = client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "applied",
                                                          "connections": []})
        assert_shape(r, 422, "connections")
        assert "missing" in r.json()["errors"][0]["msg"]
    assert client.get(f"/v1/plans/{pid}").json()["fabric"]["fabric_ready"] is False
    for panel, version in panels:
        cfg = client.get(f"/v1/panels/{panel}/config").json()
        r = client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "applied",
                                                          "connections": cfg["cross_connects"]})
        assert r.status_code == 200
    assert client.get(f"/v1/plans/{pid}").json()["fabric"]["fabric_ready"] is True
    # readiness follows the latest report: a failure after the applied one
    panel, version = panels[0]
    r = client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "failed",
                                                      "message": "fiber cut", "connections": []})
    assert r.status_code == 200
    assert client.get(f"/v1/plans/{pid}").json()["fabric"]["fabric_ready"] is False
    assert client.get(f"/v1/panels/{panel}/config").json()["diff"]["add"]
    # a stale report is refused and changes nothing
    before = client.get(f"/v1/panels/{panel}/config").json()
    r = client.put(f"/v1/panels/{panel}/state", json={"applied_version": version - 1, "status": "applied"})
    assert r.status_code == 409 and "stale" in r.json()["detail"]
    assert client.get(f"/v1/panels/{panel}/config").json() == before
    r = client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "applied"})
    assert r.status_code == 200 and r.json()["fabric_ready_plans"] == [pid]


# ----- finished jobs are never written again --------------------------------------------------------------
def test_a_late_delivery_never_writes_to_a_finished_plan(client, settings):
    from services.jobs.stages import attempts
    from services.jobs.kinds.plan import schedules
    from services.store.models import PlanArtifact

    p = wait_done(client, client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"])
    assert p["status"] == "done"
    state = {"selected": p["topology"], "frontier": p["frontier"]}
    with session_scope(settings.sqlalchemy_url) as s:
        before = sorted((a.name, a.digest) for a in s.query(PlanArtifact).filter_by(plan_id=p["id"]))
        attempt = repo.get_plan(s, p["id"]).attempts
    for late in (attempt, attempt - 1, None):           # the same, an older and an unguarded delivery
        with attempts.attempt_of(late), pytest.raises(attempts.Superseded):
            schedules.stage_schedules(state, p["id"])
    assert not attempts.fail_plan(p["id"], "late failure", url=settings.sqlalchemy_url)
    with session_scope(settings.sqlalchemy_url) as s:
        assert sorted((a.name, a.digest) for a in s.query(PlanArtifact).filter_by(plan_id=p["id"])) == before
    assert client.get(f"/v1/plans/{p['id']}").json()["status"] == "done"


# ----- limits --------------------------------------------------------------------------------------------
@pytest.fixture
def limited(settings, request):
    from services.api.app import create_app
    from services.store.db import migrate

    st = settings.model_copy(update=request.param)
    migrate(st.sqlalchemy_url)
    with TestClient(create_app(st)) as c:
        yield c


BIG = {**MINIMAL, "nodes": 1024, "workload": {"collective": "allreduce", "sizes_bytes": [1 << 30]}}


@pytest.mark.parametrize("limited", [{"task_time_limit_s": 1}], indirect=True)
def test_a_task_beyond_the_time_limit_fails_its_job_with_that_reason(limited):
    """genkautz(62, 1024): 1024 receivers x 62 in-arcs of min cuts, many seconds of BFB in one task."""
    r = evaluate(limited, {"expr": "genkautz(62, 1024)"})
    assert_shape(r, 422)
    assert "exceeded the time limit of 1 s" in r.json()["errors"][0]["msg"], r.json()
    assert limited.get("/healthz").status_code == 200


@pytest.mark.parametrize("limited", [{"task_memory_limit_mb": 64}], indirect=True)
def test_a_task_beyond_the_memory_limit_fails_its_plan_with_that_reason(limited):
    p = wait_done(limited, limited.post("/v1/plans", json={**BIG, "job_id": unique_job()}).json()["id"])
    assert p["status"] == "failed" and "memory limit of 64 MiB" in p["reason"], p["reason"]


# ----- the database away: 503 with Retry-After, not 500 ----------------------------------------------------
def test_database_down_is_503_with_retry_after(settings):
    from services.api.app import create_app

    st = settings.model_copy(update={"database_url": "postgresql+psycopg://postgres@127.0.0.1:9/none",
                                     "broker_url": "redis://127.0.0.1:9/0"})
    with TestClient(create_app(st)) as c:
        r = c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()})
        assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
        assert c.get("/v1/plans/" + "0" * 32).status_code == 503
        assert c.get("/healthz").status_code == 200
        ready = c.get("/readyz")
        assert ready.status_code == 503 and ready.json()["status"] == "not ready"
        # every answer of the outage is one the document declares for its operation
        from services.api.openapi_export import document

        paths = document()["paths"]
        for path, template in (("/v1/stats", "/v1/stats"), ("/v1/plans", "/v1/plans"), ("/readyz", "/readyz"),
                               ("/v1/fabrics", "/v1/fabrics"), ("/v1/panels", "/v1/panels")):
            code = c.get(path).status_code
            assert str(code) in paths[template]["get"]["responses"], (path, code)


def test_only_bodies_that_are_read_are_refused_for_size():
    """The guard reads (and refuses) bodies of POST, PUT and PATCH only: a GET announcing a huge body is
    answered as if it had none, a POST announcing one gets 413 before anything is read."""
    import asyncio

    from services.api.guard import MAX_BODY_BYTES, InputGuard

    def run(method: str) -> int:
        seen = []

        async def app(scope, receive, send):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                seen.append(message["status"])
        scope = {"type": "http", "method": method, "path": "/v1/plans", "query_string": b"",
                 "headers": [(b"content-length", str(MAX_BODY_BYTES + 1).encode())]}
        asyncio.run(InputGuard(app)(scope, receive, send))
        return seen[0]
    assert run("GET") == 200 and run("DELETE") == 200
    assert run("POST") == 413 and run("PUT") == 413


# ----- long polls wait on notifications, not on the database ----------------------------------------------
def test_idle_long_polls_do_not_read_the_database(client, monkeypatch):
    import threading

    import services.api.routes.panels as panels

    assert client.post("/v1/fabrics", json=PLANES).status_code == 201
    reads = []
    real = panels._config
    monkeypatch.setattr(panels, "_config", lambda *a: reads.append(a) or real(*a))
    monkeypatch.setattr(panels, "CONFIG_TTL_S", HANG_S)   # the cached view stays fresh however slowly polls start
    statuses = []

    def poll():
        r = client.get("/v1/panels/hf-plane0/config", params={"wait": 3}, headers={"If-None-Match": '"1"'})
        statuses.append(r.status_code)
    threads = [threading.Thread(target=poll) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=HANG_S)
    assert statuses == [304] * 20
    assert len(reads) == 1                      # the first view; every poll then waits on notifications


@pytest.mark.parametrize("path", ["/v1/plans", "/v1/fabrics", "/v1/panels", "/v1/plans/some-plan/revisions"])
@pytest.mark.parametrize("params,field", [
    ({"offset": str(1 << 63)}, "offset"),              # beyond PostgreSQL's bigint: refused before any query
    ({"offset": "-1"}, "offset"),
    ({"limit": "0"}, "limit"),
    ({"limit": "1001"}, "limit"),
])
def test_every_list_is_paged_within_bounds(client, path, params, field):
    assert_shape(client.get(path, params=params), 422, field)


def test_paging_at_the_bounds_answers_an_empty_page(client):
    for path in ("/v1/plans", "/v1/fabrics", "/v1/panels"):
        r = client.get(path, params={"offset": str(1 << 31), "limit": "1000"})
        assert r.status_code == 200 and r.json() == [], (path, r.status_code, r.text[:200])
