"""README promises about the API's answers (issue 28): an evaluate 200 names its evaluation, view=summary
drops the compiled files, a plan's topology block says whose cost it reports, npz is octet-stream."""
from __future__ import annotations

from tests.conftest import MINIMAL, evaluate, unique_job, wait_done


def test_evaluate_answer_has_id_and_url(client):
    r = evaluate(client, {"expr": "hypercube(3)", "collective": "allgather"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] and body["url"].endswith(f"/v1/topologies/evaluations/{body['id']}")
    again = client.get(body["url"].split("testserver", 1)[-1]).json()
    assert again["status"] == "done" and again["result"]["steps"] == body["steps"]


def test_summary_view_topology_block_and_npz_type(client):
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    plan = wait_done(client, pid)
    assert plan["status"] == "done" and plan["compiled"]
    topo = plan["topology"]
    assert topo["collective"] == "allgather" and set(topo["costs"]) == {"allgather", "reducescatter", "allreduce"}
    assert topo["costs"]["allreduce"]["steps"] == plan["schedules"]["allreduce"]["steps"]
    summary = client.get("/v1/plans", params={"view": "summary", "job_id": plan["job_id"]}).json()[0]
    assert summary["id"] == pid and summary["compiled"] is None and summary["schedules"] is None
    npz = client.get(f"/v1/plans/{pid}/schedules/allreduce", params={"format": "npz"})
    assert npz.headers["content-type"] == "application/octet-stream"
    graphml = client.get(f"/v1/plans/{pid}/topology", params={"format": "graphml"},
                         headers={"Accept": "application/octet-stream"})
    assert graphml.headers["content-type"] == "application/octet-stream" and graphml.content.startswith(b"<?xml")
    assert client.get(f"/v1/plans/{pid}/topology", params={"format": "graphml"}
                      ).headers["content-type"].startswith("application/graphml+xml")
