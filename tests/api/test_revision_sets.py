"""A failure revision serves a schedule set per collective (issue 26): ranges tiling the sizes, each range's
schedule stored, model-checked and costing what the revision reports; predicted times use the set."""
from __future__ import annotations

import re
from fractions import Fraction

import pytest

from services.compiler.api import check_xml
from services.synthesis.schedule.cost import LinkModel, measured_tau
from services.synthesis.schedule.dependency import dependency_time
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build

from tests.conftest import poll_xml
from tests.api.test_revisions import plan, wait_revision


def test_revision_lists_verified_sets_and_predicts_with_them(client, settings):
    p = plan(client)
    base = f"/v1/plans/{p['id']}"
    arcs = client.get(f"{base}/topology").json()["arcs"]
    # two failed links, node 0's first arc and its translate from node 8 (the plan's topology is a circulant of
    # 16 nodes): BFB's latency then loses to the greedy scheduler's bandwidth above a crossover of their
    # dependency-driven times, so the allgather's set has ranges of their own (compiled to files of their own)
    assert p["topology"]["expr"].startswith("circulant(16,")
    t, h, _ = next(a for a in arcs if a[0] == 0 and a[1] != 0)
    t2, h2 = 8, (8 + h) % 16
    r = client.post(f"{base}/failures", json={"links": [{"arc": f"{t}>{h}"}, {"arc": f"{t2}>{h2}"}]})
    rev = wait_revision(client, r.json()["url"])
    assert rev["status"] == "done", rev["reason"]
    g = build(rev["expr"])
    req = client.get(base).json()["request"]
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    for c in ("allgather", "reducescatter", "allreduce"):
        rows = rev["schedules"][c]["by_size"]
        assert rows[0]["min_bytes"] == 0 and rows[-1]["max_bytes"] is None
        assert all(a["max_bytes"] == b["min_bytes"] for a, b in zip(rows, rows[1:]))
        times = []
        for i, row in enumerate(rows):
            assert row["url"].endswith(f"/schedules/{c}?range={i}")
            blob = client.get(f"{r.json()['url']}/schedules/{c}", params={"range": i, "format": "npz"})
            assert blob.status_code == 200
            sched = Schedule.from_bytes(blob.content)
            assert verify(sched, g, Collective.parse(c)).ok
            assert str(measured_tau(sched, g.degree)) == row["tau_exact"]
            served = dependency_time(sched, LinkCosts.uniform(g, link), float(row["min_bytes"]))
            _, a, b = max((x for x in row["time_pieces"] if x[0] <= row["min_bytes"]), key=lambda x: x[0])
            assert served * 1e6 == pytest.approx(a + b * row["min_bytes"], rel=1e-9)
            times.append(lambda m, sched=sched: dependency_time(sched, LinkCosts.uniform(g, link), m) * 1e6)
        # the set's time at every workload size is the revision's prediction, and no slower than the
        # schedule served at the mean size
        single = rev["schedules"][c]
        for size, us in rev["predicted_time_us"][c].items():
            m = int(size)
            k = next(i for i, row in enumerate(rows) if row["max_bytes"] is None or m < row["max_bytes"])
            assert us == pytest.approx(times[k](m), rel=1e-9)
            assert rev["barrier_time_us"][c][size] == pytest.approx(
                link.time(rows[k]["steps"], Fraction(rows[k]["tau_exact"]), m) * 1e6, rel=1e-12)
            assert us <= link.time(single["steps"], Fraction(single["tau_exact"]), m) * 1e6 * (1 + 1e-12)
    missing = client.get(f"{r.json()['url']}/schedules/allgather", params={"range": 99})
    assert missing.status_code == 404
    check_set_xml(client, rev, g)
    # other options compile on demand in a worker (202, then the file), with the range's window
    last = len(rev["schedules"]["allgather"]["by_size"]) - 1
    assert last >= 1 and not rev["compiled"]["executor"]["allgather"]["by_size"][last].get("same_file_as")
    ll = poll_xml(client, f"{r.json()['url']}/schedules/allgather", {"range": last, "format": "msccl", "proto": "LL"})
    assert ll.status_code == 200 and 'proto="LL"' in ll.text
    lo = rev["schedules"]["allgather"]["by_size"][last]["min_bytes"]
    assert re.search(rf'minBytes="{lo}" maxBytes="0"', ll.text)
    assert check_xml(ll.text, "msccl", runtime="executor").ok
    bad = client.get(f"{r.json()['url']}/schedules/allgather", params={"range": 0, "format": "oneccl"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["loc"] == ["query", "format"]
    bad = client.get(f"{r.json()['url']}/schedules/allgather", params={"range": 0, "format": "msccl",
                                                                        "min_bytes": 5})
    assert bad.status_code == 422 and bad.json()["errors"][0]["loc"] == ["query", "min_bytes"]
    # while the revision compiles (put back into its compile stage, a range's job still running): its sets are
    # served with their schedules, and the range's file is listed as pending, by its range
    from services.store.db import session_scope
    from services.store.models import CompileJob, PlanRevision

    with session_scope(settings.sqlalchemy_url) as s:
        row = s.query(PlanRevision).filter_by(plan_id=p["id"], number=rev["number"]).one()
        row.status, row.stage, row.result = "running", "compile", None
        job = s.query(CompileJob).filter_by(plan_id=p["id"], collective=f"rev{rev['number']}:allgather@{last}") \
            .order_by(CompileJob.created_at).first()         # the stage's job (the LL file above came later)
        job.status = "running"
    running = client.get(r.json()["url"]).json()
    assert running["compile_pending"] == [f"executor:allgather@{last}"]
    assert running["compiled"]["executor"]["allgather"]["by_size"][last] == {"range": last, "status": "running"}
    assert [x["tau_exact"] for x in running["schedules"]["allgather"]["by_size"]] == \
        [x["tau_exact"] for x in rev["schedules"]["allgather"]["by_size"]]
    npz = client.get(f"{r.json()['url']}/schedules/allgather", params={"range": last, "format": "npz"})
    assert npz.status_code == 200 and Schedule.from_bytes(npz.content).collective is Collective.ALLGATHER


def check_set_xml(client, view: dict, g) -> None:
    """Every range of every set has its XML, compiled at plan (revision) time: it loads in the runtime's
    parser, its minBytes/maxBytes windows tile the sizes, and the schedule it holds is the one reported
    (the range's own, or the chunked BFB substituted for it, with its steps)."""
    assert view["compile_failed"] == []
    for c in ("allgather", "reducescatter", "allreduce"):
        rows = view["schedules"][c]["by_size"]
        files = view["compiled"]["executor"][c]["by_size"]
        assert [f["range"] for f in files] == list(range(len(rows)))
        windows = []
        for row, f in zip(rows, files):
            assert f["status"] == "done" and (f["min_bytes"], f["max_bytes"]) == (row["min_bytes"], row["max_bytes"])
            r = client.get(f["url"].replace("http://testserver", ""))
            assert r.status_code == 200 and r.headers["content-type"].startswith("application/xml")
            text = r.text
            assert check_xml(text, "msccl", runtime="executor").ok
            lo, hi = (int(x) for x in re.search(r'minBytes="(\d+)" maxBytes="(\d+)"', text).groups())
            windows.append((lo, hi))
            held = f["xml_schedule"]
            assert held["steps"] == f["steps"]
            if held["exact"]:
                assert held["scheduler"] == row["scheduler"] and held["steps"] == row["steps"]
            else:                                   # a substitute, never faster than the range's own schedule
                assert held["substitutes"]["scheduler"] == row["scheduler"]
                assert held["substitutes"].get("worst_ratio", 1.0) >= 1 - 1e-12
        # executor windows: inclusive, maxBytes 0 unbounded: consecutive and disjoint from 0 up
        assert windows[0][0] == 0 and windows[-1][1] == 0
        assert all(a[1] + 1 == b[0] for a, b in zip(windows, windows[1:]))


def test_plan_lists_its_sets(client):
    """A plan's schedules carry their sets too (the construction alone when it has D(G) steps and Theorem 4's
    tau: nothing is faster at any size), each range served, verified, and the predicted times from them."""
    p = plan(client)
    g = build(p["topology"]["expr"])
    req = client.get(f"/v1/plans/{p['id']}").json()["request"]
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    for c in ("allgather", "reducescatter", "allreduce"):
        rows = p["schedules"][c]["by_size"]
        assert rows[0]["min_bytes"] == 0 and rows[-1]["max_bytes"] is None
        for i, row in enumerate(rows):
            r = client.get(row["url"].replace("http://testserver", ""), params={"format": "npz"})
            assert r.status_code == 200
            sched = Schedule.from_bytes(r.content)
            assert verify(sched, g, Collective.parse(c)).ok
            assert str(measured_tau(sched, g.degree)) == row["tau_exact"]
        for size, us in p["predicted_time_us"][c].items():
            row = next(r for r in rows if r["max_bytes"] is None or int(size) < r["max_bytes"])
            assert us == pytest.approx(link.time(row["steps"], Fraction(row["tau_exact"]), int(size)) * 1e6)
    assert client.get(f"/v1/plans/{p['id']}/schedules/allgather", params={"range": 50}).status_code == 404
    check_set_xml(client, p, g)
    main = client.get(f"/v1/plans/{p['id']}/schedules/allgather", params={"format": "msccl"})
    for f in p["compiled"]["executor"]["allgather"]["by_size"]:
        if f.get("same_file_as"):                  # a one-range set of the main schedule: the main file
            assert client.get(f["url"].replace("http://testserver", "")).content == main.content


def test_revision_sets_reuse_the_served_schedules(monkeypatch):
    """The sets take the comparison's checked schedules as they are: an allreduce range whose phases are the
    served allreduce's holds that very object (the same bytes as composing it again), and the revision encodes
    each object once (`size_sets.encoder`)."""
    from services.jobs.stages import size_sets
    from services.synthesis.bfb.degraded import degraded_schedules
    from services.synthesis.schedule.ir import allreduce

    g0 = build("circulant(16, 1, 4)")
    out = degraded_schedules(g0, [(0, 1)], LinkModel.from_units(10, 100), 1 << 20)
    sets = size_sets.revision_sets(out, g0)
    served = out.comparisons[Collective.ALLREDUCE].chosen
    same = [r for r in sets[Collective.ALLREDUCE].ranges if r.schedule is served.schedule]
    assert same, "no allreduce range holds the served allreduce"
    for r in same:
        assert allreduce(r.phases[0].schedule, r.phases[1].schedule).to_bytes() == served.schedule.to_bytes()
    encode = size_sets.encoder()
    calls = []
    real = Schedule.to_bytes
    monkeypatch.setattr(Schedule, "to_bytes", lambda self: calls.append(id(self)) or real(self))
    blobs = [encode(r.schedule) for ss in sets.values() for r in ss.ranges] + [encode(served.schedule)]
    monkeypatch.undo()
    objects = {id(r.schedule) for ss in sets.values() for r in ss.ranges} | {id(served.schedule)}
    assert sorted(calls) == sorted(objects)
    assert blobs[-1] == served.schedule.to_bytes()
