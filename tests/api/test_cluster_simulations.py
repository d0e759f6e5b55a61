"""POST /v1/cluster/simulations: a shared-cluster simulation queued for a worker (202), polled to its rows, the
same request answered from the stored result, and bad requests refused before anything is queued."""
from __future__ import annotations

from tests.conftest import wait_url

BODY = {"servers": 32, "degree": 4, "mix": {"vgg16": 0.5, "dlrm": 0.5}, "servers_per_job": 8, "jobs": [2, 4],
        "fabrics": ["direct", "fat-tree-2to1"], "gpus_per_server": 1, "iterations": 10}


def test_simulation_runs_in_a_worker(client):
    r = client.post("/v1/cluster/simulations", json=BODY)
    assert r.status_code in (200, 202), r.text
    sim = wait_url(client, r.json()["url"])
    assert sim["status"] == "done", sim["reason"]
    rows = sim["results"]
    assert [(x["jobs"], x["fabric"]) for x in rows] == [(2, "direct"), (2, "fat-tree-2to1"), (4, "direct"),
                                                         (4, "fat-tree-2to1")]
    assert all(x["p99_iteration_s"] >= x["mean_iteration_s"] > 0 for x in rows)
    again = client.post("/v1/cluster/simulations", json=BODY)          # the same request: the stored result
    assert again.status_code == 200 and again.json()["results"] == rows
    assert client.get(f"/v1/topologies/evaluations/{sim['id']}").status_code == 404


def test_bad_simulations_are_refused(client):
    for bad in ({**BODY, "mix": {"nosuch": 1.0}}, {**BODY, "jobs": [5]}, {**BODY, "fabrics": ["clos"]},
                {**BODY, "servers": 0}, {**BODY, "extra": 1}):
        r = client.post("/v1/cluster/simulations", json=bad)
        assert r.status_code == 422, (bad, r.text)
    assert client.get("/v1/cluster/simulations/" + "0" * 64).status_code == 404
