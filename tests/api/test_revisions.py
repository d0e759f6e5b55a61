"""A done plan on a live fabric (issue 14): failure reports make verified revisions, repairs re-patch and
restore the full topology, look-ahead planes keep two jobs apart, device profiles and the capital cost, and
evaluate with per-link costs. Every test runs on SQLite and PostgreSQL (the `client` fixture)."""
from __future__ import annotations


import pytest

from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.cost import measured_tau
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build

from tests.conftest import MINIMAL, unique_job, wait_done, wait_url
from tests.api.test_hardening import assert_shape
from tests.api.test_metrics import samples, scraped_until, value

OCS = {"id": "o1", "layout": "shared", "hosts": 16, "ports_per_host": 5, "kind": "ocs"}      # a spare port each


wait_revision = wait_url


def plan(client, **extra) -> dict:
    p = wait_done(client, client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job(), **extra}).json()["id"])
    assert p["status"] == "done", p["reason"]
    return p


def apply_all(client, panels) -> dict:
    """Every panel's agent applies its latest config; the last response."""
    out = None
    for panel in panels:
        v = client.get(f"/v1/panels/{panel}/config").json()["version"]
        out = client.put(f"/v1/panels/{panel}/state", json={"applied_version": v, "status": "applied"})
        assert out.status_code == 200, out.text
    return out.json()


def check_schedules(client, rev_url: str, expr: str) -> None:
    """Independently: every served schedule of the revision passes the model checker on the revision's own
    topology, and its measured tau is the one reported."""
    g = build(expr)
    rev = client.get(rev_url).json()
    for c in ("allgather", "reducescatter", "allreduce"):
        r = client.get(f"{rev_url}/schedules/{c}", params={"format": "npz"})
        assert r.status_code == 200
        sched = Schedule.from_bytes(r.content)
        report = verify(sched, g, Collective.parse(c))
        assert report.ok, report.violation
        assert str(measured_tau(sched, g.degree)) == rev["schedules"][c]["tau_exact"]


def test_failure_report_makes_a_verified_revision(client):
    p = plan(client)
    base = f"/v1/plans/{p['id']}"
    assert p["revision"]["current"] == 0 and p["revision"]["revisions"] == 1
    arcs = client.get(f"{base}/topology").json()["arcs"]
    t, h, _ = next(a for a in arcs if a[0] != a[1])
    r = client.post(f"{base}/failures", json={"links": [{"arc": f"{t}>{h}"}]})
    assert r.status_code == 202 and r.json()["number"] == 1, r.text
    rev = wait_revision(client, r.json()["url"])
    assert rev["status"] == "done", rev["reason"]
    assert rev["kind"] == "failure" and rev["current"] and rev["failed"] == [f"{t}>{h}"]
    assert rev["expr"] == f"remove({p['topology']['expr']}, {t}>{h})"
    assert rev["repair"] == {"status": "unavailable", "reason": "the plan is not bound to a fabric"}
    check_schedules(client, r.json()["url"], rev["expr"])
    # worse than the original, better than the naive fallback (a ring over the surviving links)
    cost = rev["failure_cost"]
    for c, by_size in cost["collectives"].items():
        for size, x in by_size.items():
            assert x["before_us"] == pytest.approx(p["predicted_time_us"][c][size])
            assert x["before_us"] < x["after_us"] < x["ring_fallback_us"], (c, size, x)
    w = cost["workload_us"]
    assert w["before"] < w["after"] < w["ring_fallback"] and w["slowdown"] > 1
    topo = client.get(f"{base}/revisions/1/topology").json()
    assert len(topo["arcs"]) == len(arcs) - 1 and [t, h, 0] not in topo["arcs"]
    assert client.get(f"{base}/revisions/1/topology", params={"format": "graphml"}).status_code == 200
    js = client.get(f"{base}/revisions/1/schedules/allgather").json()
    assert js["topology"] == rev["expr"] and js["steps"]
    # the revision's XML is compiled by its worker for the plan's runtimes (the executor by default), checked
    for c, summary in rev["compiled"]["executor"].items():
        assert summary["status"] in ("done", "failed"), summary
        xml = client.get(summary["url"])
        if summary["status"] == "done":
            assert xml.status_code == 200 and xml.headers["content-type"].startswith("application/xml")
            assert f'nranks="{p["topology"]["nodes"]}"' in xml.text or "ngpus" in xml.text
        else:
            assert xml.status_code == 422 and summary["reason"]
    assert rev["compiled"]["executor"]["allgather"]["status"] == "done"
    # the plan shows its current revision; the list keeps revision 0
    plan_now = client.get(base).json()
    assert plan_now["revision"]["current"] == 1 and plan_now["revision"]["failed"] == [f"{t}>{h}"]
    assert plan_now["topology"]["expr"] == p["topology"]["expr"]          # revision 0 is unchanged
    lst = client.get(f"{base}/revisions")
    assert lst.headers["x-total-count"] == "2"
    assert [(x["number"], x["kind"], x["current"]) for x in lst.json()] == [(0, "original", False), (1, "failure", True)]
    assert client.get(f"{base}/revisions/current").json()["number"] == 1
    assert client.get(f"{base}/revisions/0").json()["expr"] == p["topology"]["expr"]
    assert any(e["stage"] == "revision" for e in client.get(f"{base}/events").json())
    # the same link again: nothing new (200, the latest revision); a second link: revision 2 with both
    again = client.post(f"{base}/failures", json={"links": [{"arc": f"{t}>{h}", "lane": 0}]})
    assert again.status_code == 200 and again.json()["number"] == 1
    t2, h2, _ = next(a for a in arcs if a[0] != a[1] and (a[0], a[1]) != (t, h) and a[0] != t)
    two = client.post(f"{base}/failures", json={"links": [{"arc": f"{t2}>{h2}"}], "repair": False})
    rev2 = wait_revision(client, two.json()["url"])
    assert rev2["status"] == "done" and sorted(rev2["failed"]) == sorted([f"{t}>{h}", f"{t2}>{h2}"])
    assert rev2["repair"] == {"status": "not_requested"} and rev2["current"]
    assert rev2["workload_time_us"] >= rev["workload_time_us"] * 0.999   # losing more links never helps here


def test_failure_report_errors(client):
    p = plan(client)
    base = f"/v1/plans/{p['id']}"
    arcs = client.get(f"{base}/topology").json()["arcs"]
    missing = next(f"{a}>{b}" for a in range(16) for b in range(16) if [a, b, 0] not in arcs and a != b)
    assert_shape(client.post(f"{base}/failures", json={"links": [{"arc": missing}]}), 422, "links.0.arc")
    assert_shape(client.post(f"{base}/failures", json={"links": [{"arc": "0>1x"}]}), 422, "links.0.arc")
    t, h, _ = arcs[0] if arcs[0][0] != arcs[0][1] else arcs[1]
    assert_shape(client.post(f"{base}/failures", json={"links": [{"arc": f"{t}>{h}", "lane": 7}]}), 422,
                 "links.0.lane")
    assert_shape(client.post(f"{base}/failures", json={"links": []}), 422, "links")
    out_of_0 = [{"arc": f"{a}>{b}"} for a, b, _ in arcs if a == 0 and b != 0]      # node 0 cut off
    r = client.post(f"{base}/failures", json={"links": out_of_0})
    assert "strongly connected" in assert_shape(r, 422, "links")[0]["msg"]
    assert client.get(f"{base}/revisions").headers["x-total-count"] == "1"     # nothing was recorded
    assert client.post("/v1/plans/0123456789abcdef0123456789abcdef/failures",
                       json={"links": [{"arc": "0>1"}]}).status_code == 404
    assert client.get(f"{base}/revisions/7").status_code == 404
    assert client.get(f"{base}/revisions/0/schedules/alltoall").status_code == 404


def test_panel_degraded_report_and_ocs_repair_restore_the_topology(client):
    assert client.post("/v1/fabrics", json=OCS).status_code == 201
    p = plan(client, fabric_id="o1")
    base = f"/v1/plans/{p['id']}"
    fab = p["fabric"]
    assert fab["ready_estimate_s"] == pytest.approx(0.01)                   # an OCS: about 10 ms
    assert fab["cost"]["plan_usd"] > 0 and fab["cost"]["link_gbps"] == 25.0
    apply_all(client, ["panel0"])
    assert client.get(base).json()["fabric"]["ready_estimate_s"] == 0.0
    cfg = client.get("/v1/panels/panel0/config").json()
    victim = next(c for c in cfg["cross_connects"] if not c["loopback"])
    bad = {"ingress": victim["ingress"], "egress": victim["egress"]}
    v = cfg["version"]
    # refused with the field, nothing stored
    for body, field in (({"status": "degraded"}, ""), ({"status": "applied", "failed": [bad]}, ""),
                        ({"status": "degraded", "failed": [{"ingress": 10_000}]}, "failed.0.ingress"),
                        ({"status": "degraded", "failed": [{"ingress": victim["ingress"], "egress": 0}]}, "failed.0"),
                        ({"status": "degraded", "failed": [{}]}, "failed.0")):
        assert_shape(client.put("/v1/panels/panel0/state", json={"applied_version": v, **body}), 422, field or None)
    assert client.get(f"{base}/revisions").headers["x-total-count"] == "1"
    counted = samples(client.get("/metrics").text)
    r = client.put("/v1/panels/panel0/state", json={"applied_version": v, "status": "degraded", "failed": [bad],
                                                     "message": "no light on the fiber"})
    assert r.status_code == 200, r.text
    made = r.json()["revisions"]
    assert [(x["plan_id"], x["number"], x["kind"]) for x in made] == [(p["id"], 1, "failure")]
    rev = wait_revision(client, made[0]["url"])
    assert rev["status"] == "done", rev["reason"]
    assert rev["cause"]["source"] == "panel" and rev["cause"]["links"][0]["ingress"] == victim["ingress"]
    assert rev["failed"] == [f"{victim['tail']}>{victim['head']}"]
    check_schedules(client, made[0]["url"], rev["expr"])
    rep = rev["repair"]
    assert rep["status"] == "pending" and rep["ready_estimate_s"] == pytest.approx(0.01)
    (move,) = rep["moves"]
    assert move["arc"] == victim["arc"] and move["after"]["tx_port"] == move["after"]["rx_port"] == 4   # the spares
    # the new config avoids the failed ports; until it is applied the plan is not ready
    new = client.get("/v1/panels/panel0/config").json()
    assert new["version"] == v + 1 == rep["panels"]["panel0"]
    assert victim["ingress"] not in {c["ingress"] for c in new["cross_connects"]}
    assert victim["egress"] not in {c["egress"] for c in new["cross_connects"]}
    assert len(new["diff"]["add"]) == len(new["diff"]["remove"]) == 1
    assert client.get(base).json()["fabric"]["fabric_ready"] is False
    # the agent applies it: back on the full topology, a new revision
    done = apply_all(client, ["panel0"])
    assert done["fabric_ready_plans"] == [p["id"]]
    (restored,) = done["revisions"]
    assert restored["number"] == 2 and restored["kind"] == "restored"
    rv = client.get(restored["url"]).json()
    assert rv["current"] and rv["expr"] == p["topology"]["expr"] and rv["failed"] == []
    # a restore is not a failure: no failure cost, no slowdown; what it gains over revision 1 is its own field
    assert rv["failure_cost"] is None and rv["workload_slowdown"] is None and rv["restores"] == 1
    assert rv["restore_gain"]["compared_with_revision"] == 1 and rv["restore_gain"]["workload_us"]["slowdown"] < 1
    listed = client.get(f"{base}/revisions").json()[2]
    assert listed["kind"] == "restored" and listed["workload_slowdown"] is None and listed["restores"] == 1
    # its XML: the compiled block and links as revision 0's, served from the revision's URL
    assert rv["compiled"] and set(rv["compiled"]) == set(p["compiled"])
    runtime = next(iter(rv["compiled"]))
    xml_url = rv["compiled"][runtime]["allreduce"]["url"]
    assert xml_url.startswith(restored["url"]) and any(k.startswith("xml:") for k in rv["links"])
    assert client.get(xml_url).status_code == 200
    assert rv["schedules"]["allreduce"]["tau_exact"] == p["schedules"]["allreduce"]["tau_exact"]
    assert client.get(f"{restored['url']}/topology").json()["expr"] == p["topology"]["expr"]
    assert client.get(made[0]["url"]).json()["repair"]["status"] == "applied"
    now = client.get(base).json()
    assert now["revision"]["current"] == 2 and now["fabric"]["fabric_ready"] is True
    assert now["fabric"]["panels"] == {"panel0": v + 1}
    assert [x["kind"] for x in client.get(f"{base}/revisions").json()] == ["original", "failure", "restored"]
    # each revision counted once, by its cause, when it was recorded
    before = {kc: value(counted, "fabricplan_revisions_total", kind=kc[0], cause=kc[1])
              for kc in (("failure", "panel"), ("restored", "repair"), ("failure", "scheduler"))}
    want = {**before, ("failure", "panel"): before[("failure", "panel")] + 1,
            ("restored", "repair"): before[("restored", "repair")] + 1}
    found = scraped_until(client, lambda f: all(value(f, "fabricplan_revisions_total", kind=k, cause=c) == n
                                                for (k, c), n in want.items()))
    assert {kc: value(found, "fabricplan_revisions_total", kind=kc[0], cause=kc[1]) for kc in want} == want


def test_repair_without_spare_ports_keeps_the_degraded_revision(client):
    assert client.post("/v1/fabrics", json={"id": "f1", "layout": "planes", "hosts": 16, "ports_per_host": 4,
                                            "panel_prefix": "f1-plane"}).status_code == 201
    p = plan(client, fabric_id="f1")
    assert p["fabric"]["ready_estimate_s"] == 300.0         # a patch panel: one robot batch of <= 48 changes
    arcs = client.get(f"/v1/plans/{p['id']}/topology").json()["arcs"]
    t, h, _ = next(a for a in arcs if a[0] != a[1])
    r = client.post(f"/v1/plans/{p['id']}/failures", json={"links": [{"arc": f"{t}>{h}"}]})
    rev = wait_revision(client, r.json()["url"])
    assert rev["status"] == "done" and rev["repair"]["status"] == "impossible"
    assert "cannot be re-patched" in rev["repair"]["reason"] and rev["current"]
    assert rev["cause"]["links"][0]["panel"].startswith("f1-plane")        # where the failed link is cabled


def test_lookahead_keeps_two_jobs_configs_apart(client):
    r = client.post("/v1/fabrics", json={"id": "la", "layout": "planes", "hosts": 16, "ports_per_host": 4,
                                         "panel_prefix": "la", "lookahead": True})
    assert r.status_code == 201 and r.json()["lookahead"] and len(r.json()["panels"]) == 8
    hosts = [f"h{i:02d}" for i in range(16)]
    a = plan(client, fabric_id="la", hosts=hosts)
    b = plan(client, fabric_id="la", hosts=hosts, lookahead=True)     # the next job, hosts still busy
    assert (a["fabric"]["plane"], b["fabric"]["plane"]) == ("active", "lookahead")
    assert set(a["fabric"]["panels"]) == {f"la{k}" for k in range(4)}
    assert set(b["fabric"]["panels"]) == {f"la{k}-alt" for k in range(4)}
    fab = client.get("/v1/fabrics/la").json()
    assert fab["reserved"] == dict.fromkeys(hosts, a["id"]) and fab["lookahead_reserved"] == dict.fromkeys(hosts, b["id"])
    for k in range(4):                     # each panel carries one job, marked with its plane
        act = client.get(f"/v1/panels/la{k}/config").json()["cross_connects"]
        ahead = client.get(f"/v1/panels/la{k}-alt/config").json()
        assert {c["plan_id"] for c in act} == {a["id"]} and {c["plane"] for c in act} == {"active"}
        assert {c["plan_id"] for c in ahead["cross_connects"]} == {b["id"]}
        assert {c["plane"] for c in ahead["cross_connects"]} == {"lookahead"} and ahead["planes"]["active"] == 0
    # a third job cannot take the look-ahead planes, nor the active ones
    c = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job(), "fabric_id": "la", "hosts": hosts,
                                       "lookahead": True})                # refused at the request
    assert c.status_code == 409 and c.json()["field"] == "hosts" and b["id"] in c.json()["reason"], c.text
    # activation waits for the panels and for the hosts
    act = client.post(f"/v1/plans/{b['id']}/activate")
    assert act.status_code == 409 and "still run another job" in act.json()["detail"]
    assert client.delete(f"/v1/plans/{a['id']}/fabric").status_code == 200
    assert "not all applied" in client.post(f"/v1/plans/{b['id']}/activate").json()["detail"]
    apply_all(client, [f"la{k}-alt" for k in range(4)])
    act = client.post(f"/v1/plans/{b['id']}/activate")
    assert act.status_code == 200 and act.json()["switches"] == dict.fromkeys(hosts, 1)
    assert client.post(f"/v1/plans/{b['id']}/activate").status_code == 409          # already active
    fab = client.get("/v1/fabrics/la").json()
    assert fab["active_sides"] == dict.fromkeys(hosts, 1) and fab["reserved"] == dict.fromkeys(hosts, b["id"])
    assert client.get(f"/v1/plans/{b['id']}").json()["fabric"]["plane"] == "active"
    ahead = client.get("/v1/panels/la0-alt/config").json()
    assert {x["plane"] for x in ahead["cross_connects"]} == {"active"}
    # the job after that is provisioned on side 0, now the look-ahead plane, without touching b's panels
    versions = {k: client.get(f"/v1/panels/la{k}-alt/config").json()["version"] for k in range(4)}
    d = plan(client, fabric_id="la", hosts=hosts, lookahead=True)
    assert set(d["fabric"]["panels"]) == {f"la{k}" for k in range(4)} and d["fabric"]["side"] == 0
    assert {k: client.get(f"/v1/panels/la{k}-alt/config").json()["version"] for k in range(4)} == versions
    assert {x["plane"] for x in client.get("/v1/panels/la0/config").json()["cross_connects"]} == {"lookahead"}
    assert client.post(f"/v1/plans/{a['id']}/activate").status_code == 409
    assert client.post("/v1/fabrics", json={"id": "flat", "layout": "planes", "hosts": 16, "ports_per_host": 4,
                                            "panel_prefix": "flat"}).status_code == 201
    no_la = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job(), "lookahead": True, "fabric_id": "flat"})
    assert no_la.status_code == 422 and "no look-ahead planes" in no_la.json()["reason"]     # at the request
    assert_shape(client.post("/v1/plans", json={**MINIMAL, "lookahead": True}), 422)


def test_device_profiles_and_capital_cost(client):
    doc = {"id": "doc", "panels": [{"id": "p-robot", "kind": "patch_panel", "ports": 8,
                                    "profile": {"robot_batch_size": 2, "reconfiguration_s": 60}}],
           "hosts": [{"id": f"x{i}", "ports": [{"tx": {"panel": "p-robot", "port": 2 * i + k},
                                                 "rx": {"panel": "p-robot", "port": 2 * i + k}} for k in range(2)]}
                     for i in range(4)]}
    assert client.post("/v1/fabrics", json=doc).status_code == 201
    prof = client.get("/v1/fabrics/doc").json()["panels"][0]["profile"]
    assert (prof["robot_batch_size"], prof["reconfiguration_s"], prof["max_ports"]) == (2, 60.0, 1008)
    assert client.get("/v1/panels/p-robot/config").json()["profile"]["model"].startswith("Telescent")
    p = plan(client, fabric_id="doc", nodes=4, degree=2)
    assert p["fabric"]["ready_estimate_s"] == 4 * 60.0           # 8 cross-connects, 2 per minute-long batch
    bad = {**doc, "id": "doc2", "panels": [{**doc["panels"][0], "id": "q", "profile": {"robot_batch_size": 0}}]}
    assert_shape(client.post("/v1/fabrics", json=bad), 422, "panels.0.profile.robot_batch_size")
    # the estimator: TopoOpt App. G's parts for 16 hosts x 4 ports on patch panels with look-ahead
    assert client.post("/v1/fabrics", json={"id": "c1", "layout": "planes", "hosts": 16, "ports_per_host": 4,
                                            "panel_prefix": "c1-", "lookahead": True}).status_code == 201
    cost = client.get("/v1/fabrics/c1/cost", params={"link_gbps": 100, "fiber_m": 100}).json()
    items = {i["item"]: i for i in cost["items"]}
    assert items["NIC ports"]["count"] == items["transceivers"]["count"] == items["1x2 switches"]["count"] == 64
    assert items["patch_panel ports"]["count"] == 128 and items["fibers"]["count"] == 256
    assert cost["total_usd"] == pytest.approx(64 * (678 + 99 + 2 * 100 + 25) + 256 * 100 * 0.30)
    assert cost["sources"] and cost["price_row_gbps"] == 100
    assert_shape(client.get("/v1/fabrics/c1/cost", params={"link_gbps": -1}), 422, "link_gbps")
    assert client.get("/v1/fabrics/none/cost").status_code == 404


def test_evaluate_with_per_link_costs(client):
    ring = [[i, (i + 1) % 6] for i in range(6)] + [[i, (i + 2) % 6] for i in range(6)]
    edges = [{"tail": a, "head": b, **({"bandwidth_gbps": 2.0} if (a, b) == (0, 1) else {})} for a, b in ring]
    r = client.post("/v1/topologies/evaluate", json={"nodes": 6, "edges": edges, "bandwidth_gbps": 100,
                                                     "size_bytes": 1 << 24, "collective": "allgather"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["heterogeneous"] and out["verified"] and out["scheduler"] in ("bfb-hetero", "bfb", "greedy", "trees", "bfb-fast")
    names = {c["scheduler"] for c in out["candidates"]}
    assert {"bfb-hetero", "bfb", "trees", "bfb-fast"} <= names
    served = next(c for c in out["candidates"] if c["scheduler"] == out["scheduler"])
    assert served["verified"] and served["time_us"] == pytest.approx(out["time_us"])
    assert out["time_us"] == pytest.approx(min(c["time_us"] for c in out["candidates"] if "time_us" in c))
    plain = client.post("/v1/topologies/evaluate", json={"nodes": 6, "edges": ring}).json()
    assert not plain["heterogeneous"] and plain["time_us"] is None
    for i, patch, field in ((0, {"bandwidth_gbps": 0}, "edges.0.bandwidth_gbps"),
                            (1, {"alpha_us": -1}, "edges.1.alpha_us"),
                            (2, {"bandwidth_gbps": "fast"}, "edges.2.bandwidth_gbps"),
                            (3, {"head": 9}, "edges.3.head")):
        bad = [dict(e) for e in edges]
        bad[i].update(patch)
        assert_shape(client.post("/v1/topologies/evaluate", json={"nodes": 6, "edges": bad}), 422, field)
    assert_shape(client.post("/v1/topologies/evaluate", json={"nodes": 6, "edges": [[0, 1, 2]]}), 422, "edges.0")
