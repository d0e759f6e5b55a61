"""HTTP API (DESIGN 4): plans end to end, idempotency, validation, artifacts, frontiers, evaluation, health.
Parametrised over the embedded SQLite backend and PostgreSQL (when available)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from services.store import repo
from services.store.db import session_scope
from services.synthesis.topology.catalog import build
from services.synthesis.schedule.ir import Schedule
from services.synthesis.schedule.verify import verify

from tests.conftest import MINIMAL, evaluate, poll_xml, unique_job, wait_done


def submit(client, body=None, key=None):
    headers = {"Idempotency-Key": key} if key else {}
    return client.post("/v1/plans", json=body or {**MINIMAL, "job_id": unique_job()}, headers=headers)


def test_the_request_is_one_typed_object():
    """A plan's request is validated once into PlanSpec; the database keeps its JSON and every stage loads the
    same object back, its link model an object and its names enums (DESIGN 4.16)."""
    from services.api.schemas import PlanRequest
    from services.compiler.runtimes.names import Runtime
    from services.jobs.requests.plan_spec import PlanSpec
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.schedule.ir import Collective

    body = PlanRequest.model_validate({**MINIMAL, "runtimes": ["rccl", "oneccl"],
                                       "workload": {"collectives": ["allgather", "allreduce"], "sizes_bytes": [64],
                                                    "weights": [2.0]}})
    stored = json.loads(json.dumps(body.dump()))
    spec = PlanSpec.load(stored)
    assert isinstance(body, PlanSpec) and spec == PlanSpec.model_validate(body.model_dump()) and spec.dump() == stored
    assert spec.link == LinkModel.from_units(MINIMAL["alpha_us"], MINIMAL["bandwidth_gbps"])
    assert spec.runtime_list == (Runtime.RCCL, Runtime.ONECCL)
    assert PlanSpec.load(MINIMAL).runtime_list == (Runtime.EXECUTOR,)
    assert [(i.collective, i.size_bytes, i.weight) for i in spec.workload.sizes_items] == [
        (Collective.ALLGATHER, 64.0, 2.0), (Collective.ALLREDUCE, 64.0, 2.0)]
    with pytest.raises(ValueError):
        PlanSpec.load({**stored, "nodes": "16"})           # the stored JSON is held to the request's rules


def test_minimal_request_completes(client):
    r = submit(client, MINIMAL)
    assert r.status_code == 202 and r.headers["Location"].endswith(r.json()["id"])
    p = wait_done(client, r.json()["id"])
    assert p["status"] == "done", p["reason"]
    t = p["topology"]
    assert {"expr", "nodes", "degree", "steps", "tau"} <= t.keys()
    assert t["nodes"] == 16 and t["degree"] == 4 and t["steps"] >= 2
    assert build(t["expr"]).nodes == 16
    assert p["frontier"] and all(e["nodes"] == 16 for e in p["frontier"])
    assert p["progress"] == {"fraction": 1.0, "stage": "done", "eta_s": None}
    assert p["created_at"].endswith(("+00:00", "Z"))                 # UTC on every backend
    for c in ("allgather", "reducescatter", "allreduce"):
        assert p["schedules"][c]["verified"] is True
    assert p["schedules"]["allreduce"]["steps"] == 2 * p["schedules"]["allgather"]["steps"]
    assert p["predicted_time_us"]["allreduce"]["1048576"] > 0
    assert p["baselines_time_us"]["double_binary_tree"] > p["workload_time_us"] if "workload_time_us" in p else True
    assert set(p["baselines_time_us"]) >= {"ring", "shifted_ring", "double_binary_tree"}


def test_status_history_and_progress(client):
    pid = submit(client).json()["id"]
    wait_done(client, pid)
    events = client.get(f"/v1/plans/{pid}/events").json()
    stages = [e["stage"] for e in events]
    assert stages[0] == "queued" and stages[-1] == "done"
    for s in ("frontier", "select", "schedule", "verify", "store"):
        assert s in stages
    fractions = [e["progress"] for e in events]
    assert fractions == sorted(fractions)


def test_idempotency_key(client):
    body = {**MINIMAL, "job_id": unique_job()}
    a = submit(client, body, key="k-1")
    b = submit(client, body, key="k-1")
    assert a.status_code == 202 and b.status_code == 200 and a.json()["id"] == b.json()["id"]
    c = submit(client, {**body, "degree": 3}, key="k-1")
    assert c.status_code == 409 and "different request" in c.json()["detail"]
    d = submit(client, body, key="k-2")
    assert d.status_code == 202 and d.json()["id"] != a.json()["id"]



def test_idempotency_key_outlives_a_schema_upgrade(client, settings):
    """A plan accepted before a field was added (its stored request lacks the field, stored with its hash then)
    is the same request when replayed after the upgrade with the same Idempotency-Key: 200, the same plan."""
    body = {**MINIMAL, "job_id": unique_job()}
    a = submit(client, body, key="k-upgrade")
    assert a.status_code == 202
    with session_scope(settings.sqlalchemy_url) as s:
        plan = repo.get_plan(s, a.json()["id"])
        old = {k: v for k, v in plan.request.items() if k != "topology"}       # as the earlier schema wrote it
        assert old != plan.request
        plan.request, plan.request_hash = old, repo.request_hash(old)
    again = submit(client, body, key="k-upgrade")
    assert again.status_code == 200 and again.json()["id"] == a.json()["id"]
    other = submit(client, {**body, "degree": 3}, key="k-upgrade")
    assert other.status_code == 409


@pytest.mark.parametrize("patch,field", [
    ({"nodes": -4}, "nodes"), ({"nodes": 16.5}, "nodes"), ({"nodes": "16"}, "nodes"), ({"nodes": 5000}, "nodes"),
    ({"degree": 0}, "degree"), ({"degree": 17}, "degree"), ({"alpha_us": -1}, "alpha_us"),
    ({"bandwidth_gbps": 0}, "bandwidth_gbps"), ({"job_id": ""}, "job_id"),
    ({"workload": {"collective": "gather", "sizes_bytes": [1]}}, "workload.collective"),
    ({"workload": {"collective": "allreduce", "sizes_bytes": []}}, "workload.sizes_bytes"),
    ({"workload": {"collective": "allreduce", "sizes_bytes": [0]}}, "workload.sizes_bytes"),
    ({"workload": {"collective": "allreduce", "sizes_bytes": [1, 2], "weights": [1]}}, "workload"),
    ({"colour": "red"}, "colour"),
])
def test_bad_bodies_are_422_with_field_and_reason(client, patch, field):
    r = client.post("/v1/plans", json={**MINIMAL, **patch})
    assert r.status_code == 422
    errors = r.json()["errors"]
    assert any(e["field"] == field or e["field"].startswith(field) for e in errors), errors
    assert all(e["msg"] for e in errors)


def test_unparsable_bodies_are_400_and_other_media_types_415(client):
    r = client.post("/v1/plans", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["errors"][0]["loc"][0] == "body"
    assert {"loc", "field", "msg", "type"} <= r.json()["errors"][0].keys()
    r = client.post("/v1/plans", content=b'{"job_id": "\xff\xfe"}', headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = client.post("/v1/plans", content=b"job_id=j1", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and "send JSON" in r.json()["errors"][0]["msg"]
    r = client.post("/v1/plans", content=b"x" * (9 << 20), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_unknown_ids_are_404(client):
    assert client.get("/v1/plans/0123456789abcdef0123456789abcdef").status_code == 404
    assert client.get("/v1/plans/nope/events").status_code == 404
    assert client.get("/v1/plans/nope/topology").status_code == 404
    assert client.get("/v1/artifacts/" + "0" * 64).status_code == 404
    pid = submit(client).json()["id"]
    wait_done(client, pid)
    assert client.get(f"/v1/plans/{pid}/schedules/gather").status_code == 404
    assert client.get(f"/v1/plans/{pid}/schedules/alltoall").status_code == 404


def test_artifacts_with_etags(client):
    pid = submit(client).json()["id"]
    p = wait_done(client, pid)
    topo = build(p["topology"]["expr"])
    r = client.get(f"/v1/plans/{pid}/topology")
    assert r.status_code == 200 and r.json()["nodes"] == 16 and len(r.json()["arcs"]) == topo.arcs
    etag = r.headers["etag"]
    assert client.get(f"/v1/plans/{pid}/topology", headers={"If-None-Match": etag}).status_code == 304
    g = client.get(f"/v1/plans/{pid}/topology", params={"format": "graphml"})
    assert g.status_code == 200 and ET.fromstring(g.content).tag.endswith("graphml")
    for c in ("allgather", "reducescatter", "allreduce"):
        blob = client.get(f"/v1/plans/{pid}/schedules/{c}", params={"format": "npz"})
        assert blob.status_code == 200
        sched = Schedule.from_bytes(blob.content)
        report = verify(sched, topo)
        assert report.ok and report.steps == p["schedules"][c]["steps"]
        assert client.get(f"/v1/plans/{pid}/schedules/{c}", params={"format": "npz"},
                          headers={"If-None-Match": blob.headers["etag"]}).status_code == 304
    js = client.get(f"/v1/plans/{pid}/schedules/allgather").json()
    assert js["nodes"] == 16 and len(js["steps"]) == p["schedules"]["allgather"]["steps"]
    from services.compiler.api import check_xml

    for fmt in ("msccl", "oneccl"):          # msccl for the executor was compiled with the plan; oneccl on demand
        x = poll_xml(client, f"/v1/plans/{pid}/schedules/allreduce", {"format": fmt})
        assert x.status_code == 200 and x.headers["content-type"].startswith("application/xml")
        assert check_xml(x.text, fmt).ok
        again = client.get(f"/v1/plans/{pid}/schedules/allreduce", params={"format": fmt})
        assert again.status_code == 200 and again.headers["etag"] == x.headers["etag"]


def test_artifacts_before_done_are_409(client, settings):
    with session_scope(settings.sqlalchemy_url) as s:
        plan, _ = repo.create_plan(s, {**MINIMAL, "job_id": unique_job()}, None)
        pid = plan.id
    assert client.get(f"/v1/plans/{pid}/topology").status_code == 409
    assert client.get(f"/v1/plans/{pid}/schedules/allgather").status_code == 409


def test_frontier_endpoint_is_cached(client):
    a = client.get("/v1/frontiers", params={"nodes": 64, "degree": 4})
    b = client.get("/v1/frontiers", params={"nodes": 64, "degree": 4})
    assert a.status_code == b.status_code == 200
    assert a.json()["cached"] is False and b.json()["cached"] is True
    assert a.json()["entries"] == b.json()["entries"]
    assert a.json()["entries"][0]["steps"] == 3 and a.json()["bound"]["steps"] == 3
    bi = client.get("/v1/frontiers", params={"nodes": 64, "degree": 4, "bidirectional": True}).json()
    assert all(e["bidirectional"] for e in bi["entries"])
    assert client.get("/v1/frontiers", params={"nodes": 1, "degree": 4}).status_code == 422
    assert client.get("/v1/frontiers", params={"nodes": 64, "degree": 17}).status_code == 422


def test_frontier_per_collective(client):
    """genkautz(3, 22) is not reverse-symmetric: its allreduce pays the reduce-scatter on the transpose."""
    ar = client.get("/v1/frontiers", params={"nodes": 22, "degree": 3, "collective": "allreduce"})
    assert ar.status_code == 200 and ar.json()["collective"] == "allreduce"
    assert ar.json()["bound"] == {"steps": 6, "tau": 21 / 11, "tau_exact": "21/11"}
    for e in ar.json()["entries"]:
        assert e["collective"] == "allreduce" and set(e["costs"]) == {"allgather", "reducescatter", "allreduce"}
        assert e["steps"] == e["costs"]["reducescatter"]["steps"] + e["costs"]["allgather"]["steps"]
    gk = [e for e in ar.json()["entries"] if e["expr"] == "genkautz(3, 22)"]
    assert not gk or gk[0]["tau_exact"] == "135/44"
    ag = client.get("/v1/frontiers", params={"nodes": 22, "degree": 3}).json()
    assert ag["collective"] == "allgather" and all(e["collective"] == "allgather" for e in ag["entries"])
    bad = client.get("/v1/frontiers", params={"nodes": 22, "degree": 3, "collective": "alltoall"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["loc"][-1] == "collective"


def test_evaluate_expression_and_edges(client):
    r = evaluate(client, {"expr": "genkautz(4, 64)"})
    assert r.status_code == 200
    assert (r.json()["steps"], r.json()["tau_exact"], r.json()["verified"]) == (3, "21/16", True)
    r = evaluate(client, {"nodes": 4, "edges": [[0, 1], [1, 2], [2, 3], [3, 0]], "collective": "allreduce"})
    assert r.status_code == 200 and r.json()["steps"] == 6 and r.json()["tau_exact"] == "3/2"
    bad = client.post("/v1/topologies/evaluate", json={"expr": "torus(4,"})
    assert bad.status_code == 422 and "position" in bad.json()["errors"][0]["msg"]
    bad = client.post("/v1/topologies/evaluate", json={"nodes": 3, "edges": [[0, 1], [1, 5]]})
    assert bad.status_code == 422 and "outside" in bad.json()["errors"][0]["msg"]
    bad = client.post("/v1/topologies/evaluate", json={"nodes": 3, "edges": [[0, 1], [1, 2]]})
    assert bad.status_code == 422 and "not strongly connected" in bad.json()["errors"][0]["msg"]
    r = evaluate(client, {"nodes": 3, "edges": [[0, 1], [1, 2], [2, 0], [0, 2]]})
    assert r.status_code == 200 and r.json()["verified"] and r.json()["degree"] == 2      # irregular is fine
    assert client.post("/v1/topologies/evaluate", json={}).status_code == 422
    big = client.post("/v1/topologies/evaluate", json={"expr": "hypercube(12)"})
    assert big.status_code == 422 and "submit a plan" in big.json()["errors"][0]["msg"]
    dense = client.post("/v1/topologies/evaluate", json={"expr": "complete(70)"})
    assert dense.status_code == 422 and "degree at most 62" in dense.json()["errors"][0]["msg"]


def test_health_ready_metrics(client):
    assert client.get("/healthz").json() == {"status": "ok", "api_keys_required": False}
    r = client.get("/readyz").json()
    assert r["status"] == "ready" and r["checks"]["database"] == "ok"
    submit(client)
    m = client.get("/metrics").text
    assert "fabricplan_plans_created_total" in m and "fabricplan_http_request_seconds" in m


def test_lost_worker_redelivers_then_fails_with_reason(settings):
    """A running plan whose worker stopped beating goes back to the outbox for its next attempt; once
    max_attempts workers were lost it fails with the reason."""
    from datetime import datetime, timedelta, timezone

    from services.jobs.stages import attempts
    from services.store import jobs
    from services.store.db import migrate
    from services.store.models import Plan

    migrate(settings.sqlalchemy_url)

    def lose(pid, attempts):
        with session_scope(settings.sqlalchemy_url) as s:
            plan = s.get(Plan, pid)
            plan.status, plan.stage, plan.attempts, plan.dispatched_at = "running", "schedule", attempts, plan.created_at
            plan.holder = "a-worker-that-died"
            plan.heartbeat_at = datetime.now(timezone.utc) - timedelta(hours=2)
        with session_scope(settings.sqlalchemy_url) as s:
            return jobs.lost(s, 600, max_attempts=2)

    with session_scope(settings.sqlalchemy_url) as s:
        pid = repo.create_plan(s, {**MINIMAL, "job_id": unique_job()}, None)[0].id
    assert lose(pid, 1) == [("plan", pid, None)]
    with session_scope(settings.sqlalchemy_url) as s:
        plan = s.get(Plan, pid)
        assert plan.status == "queued" and plan.dispatched_at is None
        assert "worker lost" in plan.events[-1].message and "lost 1 of 2 times" in plan.events[-1].message
    [(kind, _, reason)] = lose(pid, 2)
    assert kind == "plan" and "worker lost" in reason and "schedule" in reason
    assert attempts.fail_plan(pid, reason, url=settings.sqlalchemy_url)
    assert not attempts.fail_plan(pid, "again", url=settings.sqlalchemy_url)      # failed is final
    with session_scope(settings.sqlalchemy_url) as s:
        assert s.get(Plan, pid).status == "failed" and "worker lost" in s.get(Plan, pid).reason


def test_weighted_multi_collective_workload(client):
    body = {**MINIMAL, "job_id": unique_job(), "nodes": 64,
            "workload": {"collectives": ["allreduce", "allgather"], "sizes_bytes": [1024, 1 << 26], "weights": [10, 1]}}
    p = wait_done(client, submit(client, body).json()["id"])
    assert p["status"] == "done"
    times = {e["expr"]: e["workload_time_us"] for e in p["frontier"]}
    assert p["topology"]["expr"] == min(times, key=times.get)


def test_bidirectional_only_plan(client):
    body = {**MINIMAL, "job_id": unique_job(), "nodes": 12, "bidirectional_only": True}
    p = wait_done(client, submit(client, body).json()["id"])
    assert p["status"] == "done" and p["topology"]["bidirectional"] is True
    assert build(p["topology"]["expr"]).bidirectional


def test_list_plans_by_job(client):
    body = {**MINIMAL, "job_id": unique_job()}
    pid = submit(client, body).json()["id"]
    listed = client.get("/v1/plans", params={"job_id": body["job_id"]}).json()
    assert [p["id"] for p in listed] == [pid]


def test_workload_with_an_alltoall_share(client):
    body = {**MINIMAL, "job_id": unique_job(), "nodes": 64,
            "workload": {"collective": "allreduce", "sizes_bytes": [1 << 20], "alltoall_bytes": 1 << 20,
                         "alltoall_weight": 10}}
    p = wait_done(client, submit(client, body).json()["id"])
    assert p["status"] == "done", p["reason"]
    assert all(e["alltoall_f"] > 0 for e in p["frontier"])
    times = {e["expr"]: e["workload_time_us"] for e in p["frontier"]}
    assert p["topology"]["expr"] == min(times, key=times.get)
    assert min(p["baselines_time_us"].values()) > times[p["topology"]["expr"]]
    bad = {**body, "workload": {"collective": "allreduce", "sizes_bytes": [1], "alltoall_weight": 1}}
    r = client.post("/v1/plans", json=bad)
    assert r.status_code == 422 and "alltoall_bytes" in r.json()["errors"][0]["msg"]


def test_finished_plan_get_is_served_from_memory(client, monkeypatch):
    """The polled GET of a finished plan touches neither the database nor the thread pool (the p99 target
    of bench/service.py depends on it): with the database made unreachable it still answers."""
    import services.api.auth as auth
    import services.api.routes.plans as rp

    pid = submit(client).json()["id"]
    wait_done(client, pid)
    first = client.get(f"/v1/plans/{pid}")

    def no_db(*a, **k):
        raise AssertionError("the database was used")
    monkeypatch.setattr(rp, "session_scope", no_db)
    monkeypatch.setattr(auth, "session_scope", no_db)
    again = client.get(f"/v1/plans/{pid}")
    assert again.status_code == 200 and again.content == first.content
    assert client.get(f"/v1/plans/{pid}", headers={"If-None-Match": first.headers["etag"]}).status_code == 304
