"""The API the dashboard reads (on SQLite and PostgreSQL): plan filters and pagination, per-step link loads,
/v1/stats and the fabricplan_plans gauge, /v1/panels, the topology facts, the page and the offline docs, and
the vendored files against vendor/VENDOR.json."""
from __future__ import annotations

import hashlib
import json
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from services.api.routes.dashboard import DASHBOARD_DIR
from services.jobs.stages.artifacts import topology_json
from services.store import repo
from services.store.db import session_scope
from services.synthesis.bfb.lp import bfb_allgather, bfb_schedule
from services.synthesis.schedule.cost import link_loads, measured_tau, step_max_loads
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective, Schedule
from services.synthesis.topology.catalog import build

from tests.conftest import MINIMAL, evaluate, unique_job, wait_done

PLANES = {"id": "f1", "layout": "planes", "hosts": 32, "ports_per_host": 4, "panel_prefix": "f1-plane"}
VENDOR = DASHBOARD_DIR / "vendor"


def done_plan(client, **over) -> dict:
    r = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job(), **over})
    p = wait_done(client, r.json()["id"])
    assert p["status"] == "done", p["reason"]
    return p


# ----- plans: filters, pagination, summary view ---------------------------------------------------------------
def test_plan_list_filters_and_paginates(client, settings):
    a = done_plan(client)
    b = done_plan(client, nodes=12, degree=3)
    with session_scope(settings.sqlalchemy_url) as s:
        queued = repo.create_plan(s, {**MINIMAL, "job_id": "waiting"}, None)[0].id   # never dispatched
    r = client.get("/v1/plans")
    assert r.status_code == 200 and r.headers["X-Total-Count"] == "3"
    assert [p["id"] for p in r.json()] == [queued, b["id"], a["id"]]                  # newest first
    page = client.get("/v1/plans", params={"limit": 1, "offset": 1})
    assert page.headers["X-Total-Count"] == "3" and [p["id"] for p in page.json()] == [b["id"]]
    assert client.get("/v1/plans", params={"offset": 5}).json() == []

    def ids(**params):
        r = client.get("/v1/plans", params=params)
        assert r.status_code == 200, r.text
        assert int(r.headers["X-Total-Count"]) == len(r.json())
        return {p["id"] for p in r.json()}
    assert ids(status="queued") == {queued}
    assert ids(status=["queued", "done"]) == {queued, a["id"], b["id"]}
    assert ids(nodes=12) == {b["id"]}
    assert ids(degree=4) == {queued, a["id"]}
    assert ids(nodes=16, status="done") == {a["id"]}
    assert ids(job_id="waiting") == {queued}
    assert ids(fabric_id="nope") == set()
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}, {"status": "lost"}, {"nodes": 1}, {"view": "all"}):
        r = client.get("/v1/plans", params=bad)
        assert r.status_code == 422 and r.json()["errors"][0]["field"].startswith(next(iter(bad))), r.text


def test_summary_view_leaves_out_the_heavy_fields(client):
    p = done_plan(client)
    full = client.get("/v1/plans").json()[0]
    summary = client.get("/v1/plans", params={"view": "summary"}).json()[0]
    assert full["frontier"] and full["schedules"] and full["predicted_time_us"]
    for k in ("frontier", "schedules", "predicted_time_us", "baselines_time_us"):
        assert summary[k] is None
    assert summary["topology"] == full["topology"] == p["topology"] and summary["request"] == full["request"]


def test_plans_bound_to_a_fabric(client):
    assert client.post("/v1/fabrics", json=PLANES).status_code == 201
    bound = done_plan(client, fabric_id="f1")
    done_plan(client)
    listed = client.get("/v1/plans", params={"fabric_id": "f1"})
    assert [p["id"] for p in listed.json()] == [bound["id"]] and listed.headers["X-Total-Count"] == "1"
    assert client.delete(f"/v1/plans/{bound['id']}/fabric").status_code == 200
    assert [p["id"] for p in client.get("/v1/plans", params={"fabric_id": "f1"}).json()] == [bound["id"]]


# ----- topology facts, permutations ---------------------------------------------------------------------------
def test_plan_topology_reports_distances_and_permutations(client):
    p = done_plan(client)
    t = p["topology"]
    topo = build(t["expr"])
    dist = topo.distance_matrix
    assert t["distance_counts"] == [int((dist == k).sum()) for k in range(1, topo.diameter + 1)]
    assert t["mean_distance"] == pytest.approx(dist.sum() / (topo.nodes * (topo.nodes - 1)))
    assert t["t_b_us_per_mib"] == pytest.approx(t["tau"] * 2 ** 20 / (100e9 / 8) * 1e6)
    art = client.get(f"/v1/plans/{p['id']}/topology").json()
    perm = np.array(art["permutation"])
    arcs = np.array(art["arcs"])
    assert sorted(perm.tolist()) == sorted(list(range(topo.degree)) * topo.nodes)
    for k in range(topo.degree):     # each permutation: every node once as a tail and once as a head
        assert sorted(arcs[perm == k, 0]) == sorted(arcs[perm == k, 1]) == list(range(topo.nodes))


def test_evaluate_returns_distances_and_arcs_to_draw(client):
    r = evaluate(client, {"expr": "ring(6, 2)", "with_arcs": True})
    assert r.status_code == 200, r.text
    e = r.json()
    assert e["distance_counts"] == [6] * 5 and e["mean_distance"] == 3 and e["bidirectional"] is False
    assert e["arcs"] == topology_json(build("ring(6, 2)"))["arcs"] and len(e["permutation"]) == 12
    plain = evaluate(client, {"expr": "ring(6, 2)"}).json()
    assert plain["arcs"] is None and plain["permutation"] is None
    big = evaluate(client, {"expr": "genkautz(2, 300)", "with_arcs": True}).json()
    assert big["nodes"] == 300 and big["arcs"] is None          # drawn up to 256 nodes only
    bad = client.post("/v1/topologies/evaluate", json={"expr": "torus(4,"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "expr"


# ----- link loads ---------------------------------------------------------------------------------------------
def test_link_loads_of_a_plan(client):
    p = done_plan(client)
    topo = build(p["topology"]["expr"])
    for c in ("allgather", "reducescatter", "allreduce"):
        r = client.get(f"/v1/plans/{p['id']}/schedules/{c}/loads")
        assert r.status_code == 200, r.text
        L = r.json()
        sched = Schedule.from_bytes(client.get(f"/v1/plans/{p['id']}/schedules/{c}", params={"format": "npz"}).content)
        want = link_loads(sched, topo) / sched.grid
        assert L["steps"] == sched.steps == len(L["loads"]) and L["arcs"] == topo.arcs == len(L["links"])
        assert L["arcs_per_column"] == 1 and np.allclose(L["loads"], want)
        assert L["step_max"] == pytest.approx((step_max_loads(sched) / sched.grid).tolist())
        assert L["tau"] == pytest.approx(p["schedules"][c]["tau"])
        assert [[x["tail"], x["head"], x["lane"]] for x in L["links"]] == topo_arcs(topo)
    grouped = client.get(f"/v1/plans/{p['id']}/schedules/allreduce/loads", params={"max_links": 10}).json()
    width = grouped["arcs_per_column"]
    assert width == 7 and len(grouped["links"]) == len(grouped["loads"][0]) == 10         # ceil(64 / 10)
    assert grouped["links"][-1]["last_arc"] == topo.arcs - 1 and grouped["links"][1]["first_arc"] == width
    assert [max(row) for row in grouped["loads"]] == pytest.approx(grouped["step_max"])    # maxima survive
    assert client.get(f"/v1/plans/{p['id']}/schedules/gather/loads").status_code == 404
    assert client.get("/v1/plans/nope/schedules/allgather/loads").status_code == 404
    assert client.get(f"/v1/plans/{p['id']}/schedules/allgather/loads", params={"max_links": 0}).status_code == 422


def topo_arcs(topo) -> list:
    return [[int(a), int(b), int(l)] for a, b, l in zip(topo.tails, topo.heads, topo.lanes)]


def test_link_loads_of_a_plan_that_predates_them(client, settings):
    """Nothing is computed in a request: a plan without stored loads (not done, or finished before they were
    stored) gets 409 with the reason, and the finished plan is not written."""
    p = done_plan(client)
    with session_scope(settings.sqlalchemy_url) as s:
        s.delete(repo.plan_artifact(s, p["id"], "loads:allgather"))
    r = client.get(f"/v1/plans/{p['id']}/schedules/allgather/loads")
    assert r.status_code == 409 and "submit it again" in r.json()["detail"]
    with session_scope(settings.sqlalchemy_url) as s:
        assert repo.plan_artifact(s, p["id"], "loads:allgather") is None
        queued = repo.create_plan(s, {**MINIMAL, "job_id": "waiting"}, None)[0].id
    assert client.get(f"/v1/plans/{queued}/schedules/allgather/loads").status_code == 409


@hsettings(max_examples=12, deadline=None)
@given(st.sampled_from(["torus(3, 4)", "genkautz(3, 10)", "ring(5, 2)", "debruijn(2, 3)", "circulant(11)",
                        "line(bipartite(2))", "dcirculant(9, 2, 3)"]),
       st.sampled_from(list(ALLGATHER_FAMILY)))
def test_link_loads_agree_with_the_schedule(expr, collective):
    """Row maxima are the step maxima, every transfer is counted once, tau comes back exactly."""
    topo = build(expr)
    sched = bfb_schedule(topo, collective, allgather=bfb_allgather(topo).schedule)
    loads = link_loads(sched, topo)
    assert loads.shape == (sched.steps, topo.arcs)
    assert loads.max(axis=1).tolist() == step_max_loads(sched).tolist()
    assert int(loads.sum()) == int((sched.hi - sched.lo).sum())
    assert Fraction(topo.degree * int(loads.max(axis=1).sum()), topo.nodes * sched.grid) == measured_tau(sched, topo.degree)


def test_link_loads_reject_a_link_the_topology_lacks():
    s = Schedule.from_tuples(Collective.ALLGATHER, 3, [((0, (0, 1)), (0, 2), 1)])
    with pytest.raises(ValueError, match="does not have"):
        link_loads(s, build("ring(3)"))


@pytest.mark.parametrize("expr", ["torus(3, 4)", "debruijn(2, 3)", "genkautz(3, 10)", "ring(7)", "hypercube(4)"])
def test_distance_counts(expr):
    topo = build(expr)
    dist = topo.distance_matrix
    want = [0] + [int((dist == k).sum()) for k in range(1, topo.diameter + 1)]
    assert topo.distance_counts.tolist() == want and sum(want) == topo.nodes * (topo.nodes - 1)


# ----- stats, metrics, panels, fabrics ------------------------------------------------------------------------
def test_stats_and_the_plans_gauge(client, settings):
    done_plan(client)
    with session_scope(settings.sqlalchemy_url) as s:
        repo.create_plan(s, {**MINIMAL, "job_id": "waiting"}, None)
    stats = client.get("/v1/stats").json()
    assert stats["plans"] == {"queued": 1, "running": 0, "done": 1, "failed": 0} and stats["queue_depth"] == 1
    assert stats["fabrics"] == stats["panels"] == stats["panels_out_of_sync"] == 0
    metrics = client.get("/metrics").text
    for status, n in stats["plans"].items():
        assert re.search(rf'^fabricplan_plans\{{status="{status}"\}} {n}\.0$', metrics, re.M), status


def test_panels_show_versions_reports_and_pending_diffs(client):
    client.post("/v1/fabrics", json=PLANES)
    p = done_plan(client, fabric_id="f1")
    r = client.get("/v1/panels", params={"fabric_id": "f1"})
    assert r.status_code == 200 and r.headers["X-Total-Count"] == "4"
    panels = {x["id"]: x for x in r.json()}
    assert list(panels) == [f"f1-plane{k}" for k in range(4)]
    for x in panels.values():
        assert x["version"] == 2 and x["applied_version"] == 0 and not x["in_sync"] and x["status"] is None
        assert x["pending_add"] == x["cross_connects"] == 16 and x["pending_remove"] == 0
        assert x["plans"] == {p["id"]: 2}
    assert client.get("/v1/stats").json()["panels_out_of_sync"] == 4
    cfg = client.get("/v1/panels/f1-plane0/config").json()
    conns = [{"ingress": c["ingress"], "egress": c["egress"]} for c in cfg["cross_connects"]]
    partial = {"applied_version": 2, "status": "applied", "connections": conns[:10]}
    assert client.put("/v1/panels/f1-plane0/state", json=partial).status_code == 422   # not version 2's
    client.put("/v1/panels/f1-plane0/state", json={"applied_version": 2, "status": "applied", "connections": conns})
    first = client.get("/v1/panels", params={"fabric_id": "f1", "limit": 1}).json()[0]
    assert first["in_sync"] and first["applied_version"] == 2 and first["status"] == "applied"
    assert first["pending_add"] == 0 and first["reported_at"]
    client.put("/v1/panels/f1-plane0/state", json={"applied_version": 2, "status": "failed", "message": "jammed",
                                                    "connections": conns[:10]})
    again = client.get("/v1/panels", params={"limit": 1}).json()[0]
    assert again["status"] == "failed" and not again["in_sync"] and again["message"] == "jammed"
    assert again["pending_add"] == 6
    assert again["reported_at"] >= first["reported_at"]
    assert client.get("/v1/stats").json()["panels_out_of_sync"] == 3
    assert client.get("/v1/panels", params={"offset": 3}).json()[0]["id"] == "f1-plane3"
    assert client.get("/v1/panels", params={"fabric_id": "none"}).json() == []


def test_fabric_without_its_document(client):
    client.post("/v1/fabrics", json=PLANES)
    assert client.get("/v1/fabrics/f1").json()["spec"]["id"] == "f1"
    lean = client.get("/v1/fabrics").json()
    assert "spec" not in lean[0] and lean[0]["hosts"] == 32 and len(lean[0]["panels"]) == 4


# ----- the page, the docs and the vendored files --------------------------------------------------------------
def test_dashboard_and_docs_are_served_from_local_files(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    local = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert local and all(not u.startswith(("http:", "https:", "//")) for u in local)
    for u in local:
        if u.startswith("dashboard/"):
            assert client.get("/" + u).status_code == 200, u
    for path in ("/docs", "/redoc"):
        html = client.get(path).text
        assert "cdn" not in html and "googleapis" not in html and "http" not in html.replace("http-equiv", "")
        for u in re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html):
            assert client.get(u).status_code == 200, u
    assert client.get("/dashboard/nope.js").status_code == 404


def test_dashboard_modules_use_only_the_public_api():
    """Every URL a view fetches is a /v1 route of the OpenAPI document (or /readyz, /healthz)."""
    doc = json.loads((Path(__file__).resolve().parents[2] / "openapi" / "openapi.json").read_text())
    routes = [re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", p) + "$") for p in doc["paths"]]
    used = set()
    for js in (DASHBOARD_DIR / "js").rglob("*.js"):
        for call in re.findall(r'(?<![.\w])(?:get|list|post|download|url|send)\(\s*[`"]([^`"]+)[`"]', js.read_text()):
            used.add("/" + re.sub(r"\$\{[^}]+\}", "x", call).split("?")[0])
    assert {"/v1/plans", "/v1/stats", "/v1/frontiers", "/v1/topologies/evaluate", "/v1/panels", "/readyz"} <= used
    for u in used:
        assert any(r.match(u) for r in routes), f"{u} is not an API route"


def test_vendored_files_match_the_manifest():
    manifest = json.loads((VENDOR / "VENDOR.json").read_text())
    listed = set()
    for directory, pkg in manifest.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", pkg["version"]) and pkg["license"] and pkg["npm_integrity"]
        for name, f in pkg["files"].items():
            path = VENDOR / directory / name
            assert hashlib.sha256(path.read_bytes()).hexdigest() == f["sha256"], f"{path} differs from VENDOR.json"
            listed.add(path)
        assert any(n.startswith("LICENSE") for n in pkg["files"])
    present = {p for p in VENDOR.rglob("*") if p.is_file() and p.name != "VENDOR.json"}
    assert present == listed, present ^ listed
