"""A failure revision re-plans the all-to-all (issue 26 item 3): on the degraded topology, model-checked here
again, its measured cost the one reported, with its XML, and the failure's cost per all-to-all size; when the
all-to-all LP is beyond the library's limits, the LP (3) throughput bracket charged at its lower end."""
from __future__ import annotations

from fractions import Fraction

import pytest

from services.synthesis.evaluate import alltoall_schedule as a2a_lp
from services.synthesis.evaluate.alltoall import alltoall_throughput
from services.synthesis.schedule.cost import LinkModel, measured_tau
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build

from tests.conftest import MINIMAL, unique_job
from tests.api.test_revisions import plan, wait_revision

A2A = {"workload": {**MINIMAL["workload"], "alltoall_bytes": 1 << 20, "alltoall_weight": 1.0}}


def test_revision_rebuilds_the_alltoall_verified_with_its_xml(client, settings, monkeypatch):
    from services.store import repo
    from services.store.db import session_scope
    from services.store.models import PlanRevision

    p = plan(client, **A2A)
    assert p["alltoall"]["status"] == "built"
    base = f"/v1/plans/{p['id']}"
    arcs = client.get(f"{base}/topology").json()["arcs"]
    t, h, _ = next(a for a in arcs if a[0] != a[1])
    r = client.post(f"{base}/failures", json={"links": [{"arc": f"{t}>{h}"}]})
    url = r.json()["url"]
    rev = wait_revision(client, url)
    assert rev["status"] == "done", rev["reason"]
    g = build(rev["expr"])
    a2a, summary = rev["alltoall"], rev["schedules"]["alltoall"]
    assert a2a["status"] == "built" and a2a["expr"] == rev["expr"] and a2a["url"] == f"{url}/schedules/alltoall"
    # independently: the served schedule passes the model checker on the degraded topology (so it uses no
    # failed link) and costs what the revision reports
    sched = Schedule.from_bytes(client.get(f"{url}/schedules/alltoall", params={"format": "npz"}).content)
    assert sched.topology == rev["expr"]
    report = verify(sched, g, Collective.ALLTOALL)
    assert report.ok, report.violation
    tau = measured_tau(sched, g.degree)
    assert str(tau) == summary["tau_exact"] == a2a["tau_exact"] and report.steps == summary["steps"] == a2a["steps"]
    req = client.get(base).json()["request"]
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    d = str(1 << 20)
    assert a2a["times_us"][d]["schedule_us"] == pytest.approx(link.time(report.steps, tau, 1 << 20) * 1e6, rel=1e-12)
    # never faster than the MCF bound of the degraded topology, and the failure's cost per size
    assert float(tau) >= a2a["mcf_tau"] * (1 - 1e-6)
    cost = rev["failure_cost"]["alltoall"][d]
    assert cost["before_us"] == pytest.approx(p["alltoall"]["times_us"][d]["schedule_us"])
    assert cost["after_us"] == a2a["times_us"][d]["schedule_us"] and cost["slowdown"] >= 1 - 1e-9
    assert "training" not in rev["failure_cost"]           # a sizes workload: no training iteration to price
    # its XML, compiled by the revision's worker and checked
    xml = rev["compiled"]["executor"]["alltoall"]
    assert xml["status"] == "done", xml
    got = client.get(xml["url"])
    assert got.status_code == 200 and got.headers["content-type"].startswith("application/xml")
    assert f'nranks="{g.nodes}"' in got.text or "ngpus" in got.text
    # revision 0 serves the plan's all-to-all; a plan without one answers 404
    assert client.get(f"{base}/revisions/0").json()["alltoall"]["tau_exact"] == p["alltoall"]["tau_exact"]
    with session_scope(settings.sqlalchemy_url) as s:      # a done plan without an all-to-all: 404
        plain = repo.create_plan(s, {**MINIMAL, "job_id": unique_job()}, None)[0].id
        repo.finish(s, plain, {})
    assert client.get(f"/v1/plans/{plain}/revisions/0/schedules/alltoall").status_code == 404
    # a revision whose all-to-all LP was beyond the limit shows its bracket; its schedule URL answers 409
    out, _ = _bracket(g, link, [1 << 20], monkeypatch)
    with session_scope(settings.sqlalchemy_url) as s:
        s.add(PlanRevision(plan_id=p["id"], number=2, kind="failure", status="done", stage="done", progress=1.0,
                           cause={}, failed=[[t, h, 0], [h, t, 0]], repair=False, attempts=0,
                           result={"alltoall": out, "artifact_prefix": "rev2:"}))
    shown = client.get(f"{base}/revisions/2").json()["alltoall"]
    assert shown["status"] == "approximate" and shown["url"] is None and shown["mcf_lower"] == out["mcf_lower"]
    r = client.get(f"{base}/revisions/2/schedules/alltoall")
    assert r.status_code == 409 and out["reason"] in r.json()["detail"]


def _bracket(g, link, sizes, monkeypatch):
    """The revision's all-to-all of g with MAX_LP_VARIABLES lowered so its LP is beyond the limit, and the
    tree-routing schedule's transfer budget (the route past that limit) lowered below its fewest rounds."""
    from services.jobs.kinds import revision

    monkeypatch.setattr(a2a_lp, "MAX_LP_VARIABLES", 10)
    monkeypatch.setattr(a2a_lp, "TREE_TRANSFERS", 10)
    try:
        return revision._alltoall(g, link, sizes)
    finally:
        monkeypatch.undo()


def test_alltoall_beyond_the_lp_limit_falls_back_to_the_bracket(monkeypatch):
    """An all-to-all LP above MAX_LP_VARIABLES (here lowered so a 16-node degraded torus exceeds it): no
    schedule, the LP (3) bracket plan selection would use, the time charged at its lower end."""
    from services.jobs.kinds import revision

    g = build("remove(torus(4, 4), 0>1)")
    link = LinkModel.from_units(10, 100)
    out, blobs = _bracket(g, link, [1 << 20, 1 << 24], monkeypatch)
    assert blobs is None and out["status"] == "approximate" and "limit 10)" in out["reason"]
    assert "budget 10" in out["reason"]
    mcf = alltoall_throughput(g, method="lp")
    assert out["mcf_lower"] <= mcf.upper and mcf.lower <= out["mcf_upper"]
    for size in (1 << 20, 1 << 24):
        t = out["times_us"][str(size)]
        charged = (size / g.nodes) / (out["mcf_lower"] * link.node_bandwidth_Bps / g.degree) * 1e6
        assert t["schedule_us"] is None and t["mcf_bound_us"] == pytest.approx(charged, rel=1e-12)
        assert t["mcf_bound_low_us"] <= t["mcf_bound_us"]
    built, _ = revision._alltoall(g, link, [1 << 20])               # the schedule it refused costs no less
    assert Fraction(built["tau_exact"]) >= Fraction(out["mcf_tau"]) * Fraction(999_999, 1_000_000)


def test_alltoall_beyond_the_lp_limit_is_scheduled_on_column_generation_trees(monkeypatch):
    """Above MAX_LP_VARIABLES the revision's all-to-all is the pipelined tree routing of LP (3) (column
    generation): built, model-checked again here, its tau at least the degraded MCF bound and its time the
    schedule's own."""
    from services.jobs.kinds import revision

    g = build("remove(torus(4, 4), 0>1)")
    link = LinkModel.from_units(10, 100)
    monkeypatch.setattr(a2a_lp, "MAX_LP_VARIABLES", 10)
    out, blobs = revision._alltoall(g, link, [1 << 20])
    assert blobs is not None and out["status"] == "built", out.get("reason")
    tau = Fraction(out["tau_exact"])
    assert tau >= Fraction(out["mcf_tau"]) * Fraction(999_999, 1_000_000)
    assert out["times_us"][str(1 << 20)]["schedule_us"] == pytest.approx(
        link.time(out["steps"], tau, 1 << 20) * 1e6, rel=1e-12)
