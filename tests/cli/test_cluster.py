"""`fabricplan cluster simulate` (TopoOpt section 5.6): the JSON interface schedulers and scripts rely on, and
its refusals."""
from __future__ import annotations

import json

import pytest

from services.cli import main
from services.fabric.cost import cost_equivalent_ratio


def test_cluster_simulate_json(capsys):
    code = main(["cluster", "simulate", "--servers", "64", "--degree", "4", "--bandwidth-gbps", "100",
                 "--mix", "vgg16=0.5,dlrm=0.5", "--servers-per-job", "8", "--jobs", "2,8",
                 "--fabrics", "direct,fat-tree,fat-tree-2to1", "--json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [(r["jobs"], r["fabric"]) for r in rows] == [(j, f) for j in (2, 8)
                                                         for f in ("direct", "fat-tree", "fat-tree-2to1")]
    for r in rows:
        assert r["p99_iteration_s"] >= r["mean_iteration_s"] > 0
        assert r["utilisation"] == r["jobs"] * 8 / 64
    # the cost-equivalent fat-tree by default: Table 2's prices at this cluster (TopoOpt 5.1, App. G)
    ratio = cost_equivalent_ratio(64, 4, 100.0)
    assert all(r["host_bandwidth_gbps"] == pytest.approx(400 / ratio) for r in rows if r["fabric"] == "fat-tree")
    assert {r["host_bandwidth_gbps"] for r in rows if r["fabric"] == "fat-tree-2to1"} == {400.0}
    direct = [r for r in rows if r["fabric"] == "direct"]
    assert direct[0]["per_model_iteration_s"]["vgg16"] == direct[1]["per_model_iteration_s"]["vgg16"]


def test_cluster_simulate_refuses_bad_input(capsys):
    assert main(["cluster", "simulate", "--jobs", "28"]) == 2
    assert "do not fit" in capsys.readouterr().err
    assert main(["cluster", "simulate", "--mix", "vgg16=x", "--json"]) == 2
    assert json.loads(capsys.readouterr().err)["error"]["type"] == "usage"
    assert main(["cluster", "simulate", "--fabrics", "clos"]) == 2


def test_cluster_simulate_poisson_trace(capsys):
    code = main(["cluster", "simulate", "--servers", "32", "--degree", "4", "--mix", "vgg16=1",
                 "--servers-per-job", "8", "--arrivals", "poisson", "--rate-per-hour", "60", "--trace-jobs", "6",
                 "--iterations", "100", "--fabrics", "direct,fat-tree-2to1", "--json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["fabric"] for r in rows] == ["direct", "fat-tree-2to1"]
    for r in rows:
        assert r["jobs"] == 6 and r["mean_completion_s"] >= 100 * r["mean_iteration_s"] * (1 - 1e-9) > 0
        assert 0 < r["utilisation"] <= 1
    assert rows[0]["reconfiguration_s"] == 6 * 300.0 and rows[1]["reconfiguration_s"] == 0
    assert main(["cluster", "simulate", "--arrivals", "poisson", "--trace-jobs", "0"]) == 2
