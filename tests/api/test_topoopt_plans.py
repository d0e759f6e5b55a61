"""A plan whose topology is TopoOpt's co-optimised one (`topology: {"strategy": "topoopt"}`; TopoOpt NSDI'23
section 4, Algorithm 1): the request validated (422 naming the field for a workload without model-parallel
traffic), the plan done end to end on the embedded backend for a small DLRM-like job, its topology
TopologyFinder's, its schedules served and model-checked against that topology, and its iteration reported
beside the finder's best."""
from __future__ import annotations

from fractions import Fraction

import pytest

from services.jobs.requests import workloads
from services.jobs.requests.plan_spec import PlanSpec
from services.synthesis.evaluate.iteration import CollectiveCost
from services.synthesis.evaluate.model_catalog import catalog_model
from services.synthesis.evaluate.topoopt import strategies_for, topology_finder
from services.synthesis.evaluate.training import evaluate_training
from services.synthesis.evaluate.training_job import parse_model_spec
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build

from tests.conftest import unique_job, wait_done

BASE = {"nodes": 16, "degree": 4, "alpha_us": 10, "bandwidth_gbps": 100}
LINK = LinkModel.from_units(10, 100)
TOPOOPT = {"strategy": "topoopt"}
# a DLRM-like job: dense layers data-parallel, one embedding exchange (all-to-all) heavier than the gradients,
# so TopologyFinder gives MP matchings most of the ports
MP_SPEC = {"name": "tiny-dlrm", "buckets_bytes": [1 << 20], "layers": [
    {"name": "bottom-mlp", "params_bytes": 2 << 20, "forward_s": 0.0002, "backward_s": 0.0004},
    {"name": "embeddings", "params_bytes": 4096, "forward_s": 0.0001, "backward_s": 0.0002,
     "moe_tokens_bytes": 4 << 20},
    {"name": "top-mlp", "params_bytes": 2 << 20, "forward_s": 0.0003, "backward_s": 0.0006}]}


def _post(client, training: dict | None = None, **extra):
    workload = {"training": training} if training is not None else {"collective": "allreduce",
                                                                     "sizes_bytes": [1 << 20]}
    return client.post("/v1/plans", json={**BASE, "job_id": unique_job(), "workload": workload, **extra})


def test_a_topoopt_plan_serves_topology_finders_topology_with_verified_schedules(client):
    r = _post(client, {"model_spec": MP_SPEC}, topology=TOPOOPT)
    assert r.status_code == 202, r.text
    p = wait_done(client, r.json()["id"])
    assert p["status"] == "done", p["reason"]
    model = parse_model_spec(MP_SPEC)
    mp = strategies_for(model, 16)[0]
    design = topology_finder(16, 4, float(mp.model.gradient_bytes), mp.mp_demand)
    assert design.allreduce_degree >= 1 and len(design.mp_links) >= 2 * 16       # rings and matchings both
    ts = p["topology_strategy"]
    expr = design.topology.expr
    assert ts["strategy"] == "topoopt" and ts["parallelisation"] == "model-parallel"
    assert p["topology"]["expr"] == ts["expr"] == expr == p["training"]["best"]
    assert (ts["allreduce_rings"], ts["mp_matchings"]) == (design.allreduce_degree, len(design.mp_links) // 16)
    assert ts["generators"] == list(design.generators) and ts["bandwidth_tax"] == design.bandwidth_tax
    assert {s["name"] for s in ts["strategies"]} == {"model-parallel", "data-parallel"}
    # the finder's best is the training block's fastest frontier entry, reported beside TopoOpt's
    frontier = [e for e in p["training"]["entries"] if e["kind"] == "frontier"]
    fastest = min(frontier, key=lambda e: e["iteration_s"])
    assert ts["finder_best"] == fastest["expr"] and ts["finder_best_iteration_s"] == fastest["iteration_s"]
    assert ts["finder_best_iteration_s"] <= ts["iteration_s"] * (1 + 1e-12) or ts["finder_best"] != expr
    # the served schedules: built on TopoOpt's topology, model-checked again here from the served bytes
    topo = build(expr)
    for c in ("allgather", "reducescatter", "alltoall"):
        data = client.get(f"/v1/plans/{p['id']}/schedules/{c}", params={"format": "npz"})
        assert data.status_code == 200, data.text
        sched = Schedule.from_bytes(data.content)
        report = verify(sched, topo)
        assert report.ok and sched.collective is Collective.parse(c)
        assert (report.steps, str(report.tau)) == (p["schedules"][c]["steps"], p["schedules"][c]["tau_exact"])
    # the iteration the plan reports is the simulator's on the served allreduce cost
    ar = p["schedules"]["allreduce"]
    ev = evaluate_training(model, 16, 4, LINK, topologies=[topo], baselines=(),
                           allreduce=lambda _e: CollectiveCost(ar["steps"], Fraction(ar["tau_exact"])))
    assert ts["iteration_s"] == pytest.approx(ev.best.report.iteration_s)
    assert p["topology"]["workload_time_us"] == pytest.approx(ts["iteration_s"] * 1e6)
    chosen = next(e for e in p["training"]["entries"] if e["kind"] == "topoopt")
    assert chosen["expr"] == expr and chosen["iteration_s"] == ts["iteration_s"]
    assert p["training"]["chosen_with_alltoall_schedule"]["iteration_s"] >= ts["iteration_s"] * (1 - 1e-9)
    assert p["compiled"]["executor"]["allreduce"]["status"] == "done"


def test_a_catalogued_dlrm_plan_on_topoopt(client):
    r = _post(client, {"model": "dlrm"}, topology=TOPOOPT, nodes=8)
    assert r.status_code == 202, r.text
    p = wait_done(client, r.json()["id"])
    assert p["status"] == "done", p["reason"]
    model = catalog_model("dlrm", 8)
    mp = strategies_for(model, 8)[0]
    design = topology_finder(8, 4, float(mp.model.gradient_bytes), mp.mp_demand)
    assert p["topology"]["expr"] == design.topology.expr == p["topology_strategy"]["expr"]
    assert (p["topology"]["nodes"], p["topology"]["degree"]) == (8, 4)
    assert p["topology_strategy"]["allreduce_rings"] + p["topology_strategy"]["mp_matchings"] == 4
    ag = Schedule.from_bytes(client.get(f"/v1/plans/{p['id']}/schedules/allgather",
                                        params={"format": "npz"}).content)
    assert verify(ag, design.topology).ok


def test_a_finder_plan_has_no_topology_strategy_block(client):
    r = _post(client, {"model_spec": MP_SPEC}, topology={"strategy": "finder"})
    assert r.status_code == 202, r.text
    p = wait_done(client, r.json()["id"])
    assert p["status"] == "done" and p["topology_strategy"] is None
    assert all(e["kind"] != "topoopt" for e in p["training"]["entries"])


BAD = [  # (training workload or None for a sizes workload, body patch, the field named)
    (None, {}, "topology.strategy"),
    ({"model": "gpt2-small"}, {}, "topology.strategy"),
    ({"model_spec": {**MP_SPEC, "layers": [MP_SPEC["layers"][0]]}}, {}, "topology.strategy"),
    ({"model": "mixtral-8x7b", "gpus_per_host": 8}, {}, "topology.strategy"),
    ({"model_spec": MP_SPEC}, {"bidirectional_only": True}, "bidirectional_only"),
]


@pytest.mark.parametrize("training, patch, field", BAD, ids=[f"{i}-{b[2]}" for i, b in enumerate(BAD)])
def test_topoopt_requests_without_model_parallel_traffic_get_422_with_the_field(client, training, patch, field):
    r = _post(client, training, topology=TOPOOPT, **patch)
    assert r.status_code == 422, r.text
    d = r.json()["errors"][0]
    assert d["field"] == field and d["loc"] == ["body", *field.split(".")] and d["msg"]


def test_unknown_topology_strategies_get_422(client):
    r = _post(client, {"model_spec": MP_SPEC}, topology={"strategy": "fattree"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "topology.strategy", r.text
    with pytest.raises(ValueError, match="strategy"):
        PlanSpec.load({**BASE, "job_id": "j", "workload": {"training": {"model_spec": MP_SPEC}},
                       "topology": {"strategy": "fattree"}})
    spec = PlanSpec.load({**BASE, "job_id": "j", "workload": {"training": {"model_spec": MP_SPEC}},
                          "topology": TOPOOPT})
    workloads.check_topology(spec)               # an MP job: accepted
    assert spec.topology_strategy == "topoopt" and PlanSpec.load(spec.dump()) == spec
