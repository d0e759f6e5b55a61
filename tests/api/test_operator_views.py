"""What the API says is so: a released plan has no readiness estimate, `runtime=oneccl` is a runtime on
schedule downloads as everywhere else, and an evaluation read back has its own id and URL and the POST's
fields."""
from __future__ import annotations

from tests.conftest import MINIMAL, poll_xml, unique_job, wait_done

FABRIC = {"id": "ov", "layout": "planes", "hosts": 8, "ports_per_host": 2, "panel_prefix": "ov-p"}


def test_a_released_plan_has_no_ready_estimate(client):
    assert client.post("/v1/fabrics", json=FABRIC).status_code == 201
    body = {**MINIMAL, "job_id": unique_job(), "nodes": 8, "degree": 2, "fabric_id": "ov"}
    p = wait_done(client, client.post("/v1/plans", json=body).json()["id"])
    assert p["status"] == "done", p["reason"]
    assert p["fabric"]["ready_estimate_s"] > 0               # pending: the panels have not applied it
    assert client.delete(f"/v1/plans/{p['id']}/fabric").status_code == 200
    released = client.get(f"/v1/plans/{p['id']}").json()["fabric"]
    assert released["released"] is True and released["ready_estimate_s"] is None


def test_oneccl_is_a_runtime_on_schedule_downloads(client):
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    assert wait_done(client, pid)["status"] == "done"
    url = f"/v1/plans/{pid}/schedules/allreduce"
    r = poll_xml(client, url, {"format": "oneccl", "runtime": "oneccl"})
    assert r.status_code == 200, r.text[:300]
    assert r.content == poll_xml(client, url, {"format": "oneccl"}).content
    r = client.get(url, params={"format": "msccl", "runtime": "oneccl"})
    assert r.status_code == 422 and r.json()["field"] == "runtime" and "format=oneccl" in r.json()["reason"]


def test_an_evaluation_read_back_has_its_id_url_and_the_posts_fields(client):
    posted = client.post("/v1/topologies/evaluate", json={"expr": "ring(6)"}, params={"wait": 30})
    assert posted.status_code == 200, posted.text
    out = posted.json()
    got = client.get(out["url"]).json()
    assert got["id"] == out["id"] and got["url"] == out["url"] and got["status"] == "done"
    assert got["result"] == out                              # the same fields: id and url, no arcs
    with_arcs = client.get(out["url"], params={"with_arcs": True}).json()["result"]
    assert with_arcs["arcs"] and with_arcs["id"] == out["id"]
