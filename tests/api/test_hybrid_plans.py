"""Hybrid-parallel training plans over the API (issue 27): a training workload on multi-GPU hosts is planned
with topology and strategy chosen together, the plan's numbers are evaluate_hybrid's, and bad bodies get 422
naming the field. SQLite and PostgreSQL."""
from __future__ import annotations

import pytest

from services.jobs.requests import workloads
from services.jobs.requests.hybrid_workloads import hybrid_job, is_hybrid
from services.jobs.requests.plan_spec import PlanSpec
from services.synthesis.evaluate.hybrid import evaluate_hybrid
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.topology.catalog import build

from tests.conftest import unique_job, wait_done

BASE = {"nodes": 8, "degree": 3, "alpha_us": 5, "bandwidth_gbps": 600}
TINY = {"name": "tiny", "global_batch": 64, "transformer": {"hidden": 1024, "layers": 8, "heads": 16,
                                                             "seq_len": 512, "vocab": 32000}}


def test_hybrid_plan_chooses_topology_and_strategy(client):
    training = {"transformer_spec": TINY, "gpus_per_host": 8}
    body = {**BASE, "job_id": unique_job(), "workload": {"training": training}}
    r = client.post("/v1/plans", json=body)
    assert r.status_code == 202, r.text
    p = wait_done(client, r.json()["id"])
    assert p["status"] == "done", p["reason"]
    t = p["training_hybrid"]
    assert p["training"] is None and t["gpus"] == 64 and t["model"] == "tiny"
    ours = [e for e in t["entries"] if e["kind"] == "frontier"]
    assert [e["expr"] for e in ours] == [e["expr"] for e in p["frontier"]]
    assert t["best"] == p["topology"]["expr"] == min(ours, key=lambda e: e["iteration_s"])["expr"]
    base = {e["name"] for e in t["entries"] if e["kind"] == "baseline"}
    assert {"fat-tree", "fat-tree-2to1", "fat-tree-4to1", "rail-optimised"} <= base
    assert set(p["baselines_time_us"]) == base
    for e, f in zip(ours, p["frontier"]):
        assert f["workload_time_us"] == pytest.approx(e["iteration_s"] * 1e6)
    # the same numbers as the library, on the frontier's topologies
    job, _ = hybrid_job(_spec({**body, "workload": {"training": training}}))
    ev = evaluate_hybrid(job, 3, LinkModel.from_units(5, 600), topologies=[build(e["expr"]) for e in p["frontier"]])
    assert ev.best.iteration_s == pytest.approx(t["best_iteration_s"])
    assert ev.best.result.strategy.to_dict() == next(e for e in ours if e["expr"] == t["best"])["parallelism"]
    assert "fastest" in t["why"]


@pytest.mark.parametrize("training, field", [
    ({"model": "llama3-8b", "gpus_per_host": 8, "strategy": "tp=x"}, "workload.training.strategy"),
    ({"model": "llama3-70b", "gpus_per_host": 8, "strategy": "tp=8,pp=1,dp=8,zero=0,recompute=none"},
     "workload.training.strategy"),
    ({"model": "resnet50", "gpus_per_host": 8}, "workload.training.model"),
    ({"transformer_spec": {**TINY, "global_batch": None}, "gpus_per_host": 8}, "workload.training.global_batch"),
    ({"model": "llama3-8b", "gpus_per_host": 8, "device": "b300"}, "workload.training.device"),
    ({"model": "llama3-8b", "gpus_per_host": 100}, "workload.training.gpus_per_host"),
    ({"model": "llama3-8b", "gpus_per_host": 8, "zero3_efficiency": 0}, "workload.training.zero3_efficiency"),
    ({"model": "llama3-8b", "gpus_per_host": 8, "zero3_efficiency": 1.5}, "workload.training.zero3_efficiency"),
])
def test_bad_hybrid_bodies_get_422_with_the_field(client, training, field):
    r = client.post("/v1/plans", json={**BASE, "job_id": unique_job(), "workload": {"training": training}})
    assert r.status_code == 422, r.text
    detail = r.json()["errors"]
    assert any(d["field"].startswith(field) for d in detail), detail


def _spec(body: dict) -> PlanSpec:
    return PlanSpec.load({"job_id": "hybrid", **body})


def test_hybrid_workload_sizes():
    req = _spec({**BASE, "workload": {"training": {"model": "mixtral-8x7b", "gpus_per_host": 8}}})
    assert is_hybrid(req) and not is_hybrid(_spec({**BASE, "workload": {"training": {"model": "gpt3-175b"}}}))
    assert is_hybrid(_spec({**BASE, "workload": {"training": {"model": "llama3-8b"}}}))      # a transformer only
    job = workloads.check_training(req)
    assert workloads.message_sizes(req) == [2 * job.model.dense_params]
    assert workloads.alltoall_sizes(req) == [8 * 2 * 4096 * 4096 * 2] and workloads.has_alltoall(req)
