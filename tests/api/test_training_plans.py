"""Training plans and all-to-all schedules over the API (issue 13 items 3-4): a training workload (catalogued or
inline model) is simulated on every frontier entry and baseline in the worker, the entry with the smallest
iteration time is chosen, and the numbers are evaluate_training's; an MoE job (or a sizes workload with an
all-to-all) gets a verified all-to-all schedule served as json/npz, whose compile is a recorded refusal until
the compiler lowers all-to-all; bad training bodies get 422 naming the field. SQLite and PostgreSQL."""
from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from services.jobs.requests import workloads
from services.jobs.requests.plan_spec import PlanSpec
from services.synthesis.evaluate.iteration import CollectiveCost, TopologyCosts, best_bucket
from services.synthesis.evaluate.model_catalog import catalog_model, catalog_names
from services.synthesis.evaluate.training import evaluate_training
from services.synthesis.evaluate.training_job import parse_model_spec
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build

from tests.conftest import poll_xml, unique_job, wait_done

BASE = {"nodes": 16, "degree": 4, "alpha_us": 10, "bandwidth_gbps": 100}
LINK = LinkModel.from_units(10, 100)
MOE_SPEC = {"name": "tiny-moe", "buckets_bytes": [65536, 1 << 20], "layers": [
    {"name": "embed", "params_bytes": 3 << 20, "forward_s": 0.0004, "backward_s": 0.0008},
    {"name": "attn", "params_bytes": 1 << 20, "forward_s": 0.0003, "backward_s": 0.0006},
    {"name": "moe", "params_bytes": 4096, "forward_s": 0.0005, "backward_s": 0.001, "moe_tokens_bytes": 3 << 20},
    {"name": "head", "params_bytes": 1 << 19, "forward_s": 0.0002, "backward_s": 0.0004}]}


def _plan(client, training: dict, **extra) -> dict:
    body = {**BASE, "job_id": unique_job(), "workload": {"training": training}, **extra}
    r = client.post("/v1/plans", json=body)
    assert r.status_code == 202, r.text
    p = wait_done(client, r.json()["id"])
    assert p["status"] == "done", p["reason"]
    return p


def _expected(ev) -> dict:
    out = ev.to_dict()
    for e in out["entries"]:
        e["kind"] = "baseline" if e["kind"] == "baseline" else "frontier"
    return out


def _check_selection(p: dict, ev) -> None:
    """The plan's training block is evaluate_training's, the chosen topology its best entry, and the plan's
    times are the simulated iteration times."""
    t = p["training"]
    want = _expected(ev)
    for key in ("model", "nodes", "degree", "best", "best_iteration_s", "lower_bound_s"):
        assert t[key] == want[key], key
    assert [{k: e[k] for k in want["entries"][0]} for e in t["entries"]] == want["entries"]
    ours = [e for e in t["entries"] if e["kind"] == "frontier"]
    assert [e["expr"] for e in ours] == [f["expr"] for f in p["frontier"]]
    best = min(ours, key=lambda e: e["iteration_s"])
    assert p["topology"]["expr"] == t["best"] == best["expr"]
    assert p["topology"]["workload_time_us"] == pytest.approx(best["iteration_s"] * 1e6)
    for f, e in zip(p["frontier"], ours):
        assert f["workload_time_us"] == pytest.approx(e["iteration_s"] * 1e6)
    baselines = {e["name"]: e["iteration_s"] * 1e6 for e in t["entries"] if e["kind"] == "baseline"}
    assert baselines and p["baselines_time_us"] == pytest.approx(baselines)
    # the served allreduce schedule is the one the chosen entry was simulated with
    ar = p["schedules"]["allreduce"]
    assert (ar["steps"], ar["tau_exact"]) == (best["allreduce"]["steps"], best["allreduce"]["tau_exact"])
    assert set(p["predicted_time_us"]["allreduce"]) == {str(b) for b in t["buckets_bytes"]}


def test_training_plan_with_a_catalog_model(client):
    p = _plan(client, {"model": "gpt2-small", "device": "h100", "parallelism": {"data": 16}})
    model = catalog_model("gpt2-small", 16, device="h100")
    _check_selection(p, evaluate_training(model, 16, 4, LINK))
    assert p["training"]["moe_layers"] == 0 and p["training"]["layers"] == len(model.layers)
    assert p["alltoall"] is None and "alltoall" not in p["schedules"]
    r = client.get(f"/v1/plans/{p['id']}/schedules/alltoall")
    assert r.status_code == 404 and "no all-to-all" in r.json()["detail"]
    summary = client.get("/v1/plans", params={"job_id": p["job_id"], "view": "summary"}).json()[0]
    assert summary["training"] is None and summary["topology"]["expr"] == p["topology"]["expr"]


def test_moe_plan_with_an_inline_model_serves_its_alltoall_schedule(client):
    p = _plan(client, {"model_spec": MOE_SPEC, "parallelism": {"data": 16, "expert": 16},
                       "alltoall_cost": "schedule"})
    model = parse_model_spec(MOE_SPEC)
    _check_selection(p, evaluate_training(model, 16, 4, LINK, alltoall="schedule"))
    assert all(e["alltoall"]["source"] == "schedule" for e in p["training"]["entries"])
    expr, pid = p["topology"]["expr"], p["id"]
    # the all-to-all schedule: stored, verified again here from the served bytes, measured as reported
    a2a = p["alltoall"]
    assert a2a["status"] == "built" and a2a["verified"] and a2a["expr"] == expr
    r = client.get(f"/v1/plans/{pid}/schedules/alltoall", params={"format": "npz"})
    assert r.status_code == 200 and r.headers["etag"]
    sched = Schedule.from_bytes(r.content)
    report = verify(sched, build(expr))
    assert sched.collective is Collective.ALLTOALL and report.ok
    assert (report.steps, str(report.tau), report.transfers) == (a2a["steps"], a2a["tau_exact"], a2a["transfers"])
    assert p["schedules"]["alltoall"]["tau_exact"] == a2a["tau_exact"] and a2a["url"].endswith("/alltoall")
    assert a2a["tau"] >= a2a["mcf_tau"] * (1 - 1e-9)
    times = a2a["times_us"][str(3 << 20)]
    assert times["schedule_us"] == pytest.approx(LINK.time(report.steps, report.tau, 3 << 20) * 1e6)
    assert times["mcf_bound_us"] == pytest.approx(a2a["mcf_tau"] * (3 << 20) / LINK.node_bandwidth_Bps * 1e6)
    body = client.get(f"/v1/plans/{pid}/schedules/alltoall").json()
    assert body["collective"] == "alltoall" and body["columns"][0] == "source"
    assert sum(len(s["transfers"]) for s in body["steps"]) == report.transfers
    loads = client.get(f"/v1/plans/{pid}/schedules/alltoall/loads").json()
    assert loads["collective"] == "alltoall" and loads["tau"] == pytest.approx(a2a["tau"])
    # the chosen entry re-simulated with the schedule's cost
    chosen = next(e for e in p["training"]["entries"] if e["expr"] == expr)
    costs = TopologyCosts(expr, 16, 4, CollectiveCost(chosen["allreduce"]["steps"],
                                                      Fraction(chosen["allreduce"]["tau_exact"])),
                          None, CollectiveCost(report.steps, report.tau))
    again = p["training"]["chosen_with_alltoall_schedule"]
    assert again == pytest.approx(best_bucket(model, costs, LINK).to_dict())
    # the entries were priced with all-to-all schedules too: the same LP gives the chosen one the same cost
    assert (chosen["alltoall"]["steps"], chosen["alltoall"]["tau_exact"]) == (report.steps, str(report.tau))
    assert again["iteration_s"] == pytest.approx(p["training"]["best_iteration_s"])
    # the XML goes through the compile jobs: compiled at plan time for the executor, on demand for oneCCL
    compiled = p["compiled"]["executor"]["alltoall"]
    x = poll_xml(client, f"/v1/plans/{pid}/schedules/alltoall", {"format": "msccl"})
    assert compiled["status"] == "done" and x.status_code == 200 and 'coll="alltoall"' in x.text
    y = poll_xml(client, f"/v1/plans/{pid}/schedules/alltoall", {"format": "oneccl"})
    assert y.status_code == 200 and 'coll="alltoall"' in y.text


def test_sizes_workload_with_an_alltoall_gets_its_schedule(client):
    body = {**BASE, "job_id": unique_job(), "workload": {"collective": "allgather", "sizes_bytes": [1 << 20],
                                                         "alltoall_bytes": 1 << 22, "alltoall_weight": 1}}
    p = wait_done(client, client.post("/v1/plans", json=body).json()["id"])
    assert p["status"] == "done", p["reason"]
    assert p["training"] is None and p["alltoall"]["status"] == "built"
    assert list(p["alltoall"]["times_us"]) == [str(1 << 22)]
    data = client.get(f"/v1/plans/{p['id']}/schedules/alltoall", params={"format": "npz"}).content
    assert verify(Schedule.from_bytes(data), build(p["topology"]["expr"])).ok
    with np.load(io.BytesIO(data)) as z:
        assert z.files


BAD = [  # (workload or a body patch, the field named)
    ({"training": {}}, "workload.training"),
    ({"training": {"model": "gpt-5"}}, "workload.training.model"),
    ({"training": {"model": "gpt2-small", "model_spec": MOE_SPEC}}, "workload.training"),
    ({"training": {"model_spec": {"name": "m", "layers": []}}}, "workload.training.model_spec.layers"),
    ({"training": {"model_spec": {"name": "m", "layers": [{"name": "a", "params_bytes": 1, "forward_s": 1e9,
                                                           "backward_s": 1}]}}},
     "workload.training.model_spec.layers.0.forward_s"),
    ({"training": {"model_spec": MOE_SPEC, "batch": 4}}, "workload.training"),
    ({"training": {"model": "gpt2-small", "buckets_bytes": [0]}}, "workload.training.buckets_bytes.0"),
    ({"training": {"model": "gpt2-small", "alltoall_cost": "guess"}}, "workload.training.alltoall_cost"),
    ({"training": {"model": "gpt2-small", "parallelism": {"data": 8}}}, "workload.training.parallelism.data"),
    ({"training": {"model": "gpt2-small", "parallelism": {"expert": 16}}}, "workload.training.parallelism.expert"),
    ({"training": {"model_spec": MOE_SPEC, "parallelism": {"expert": 5}}}, "workload.training.parallelism.expert"),
    ({"training": {"model": "gpt2-small"}, "sizes_bytes": [1024]}, "workload"),
    ({}, "workload"),
    ({"training": {"model_spec": {"name": "long", "layers": [{"name": "l", "params_bytes": 1, "forward_s": 0,
                                                              "backward_s": 0}] * 10_001}}}, "workload.training"),
]


@pytest.mark.parametrize("workload, field", BAD, ids=[f for _, f in BAD])
def test_bad_training_bodies_get_422_with_the_field(client, workload, field):
    r = client.post("/v1/plans", json={**BASE, "job_id": unique_job(), "workload": workload})
    assert r.status_code == 422, r.text
    detail = r.json()["errors"]
    assert any(d["field"] == field for d in detail), detail
    d = next(d for d in detail if d["field"] == field)
    assert d["loc"][:1] == ["body"] and d["msg"]


@pytest.mark.parametrize("patch, field", [
    ({"nodes": 2048, "workload": {"training": {"model": "gpt2-small"}}}, "nodes"),
    ({"nodes": 256, "workload": {"training": {"model": "switch-base-128", "parallelism": {"expert": 256}}}},
     "workload.training.parallelism.expert"),
    ({"workload": {"training": {"model_spec": {**MOE_SPEC, "expert_parallel": 3}}}},
     "workload.training.model_spec.expert_parallel"),
    ({"nodes": 16, "workload": {"training": {"model": "gpt3-175b", "batch": 0}}}, "workload.training.batch"),
])
def test_training_checks_that_depend_on_the_nodes(client, patch, field):
    r = client.post("/v1/plans", json={**BASE, "job_id": unique_job(), **patch})
    assert r.status_code == 422, r.text
    d = r.json()["errors"][0]
    assert d["field"] == field and d["loc"] == ["body", *field.split(".")] and d["msg"]


@hsettings(max_examples=40, deadline=None, derandomize=True)
@given(name=st.sampled_from(catalog_names()), nodes=st.integers(2, 1100),
       batch=st.one_of(st.none(), st.integers(1, 4096)))
def test_catalogued_jobs_are_either_planned_or_refused_with_the_field(name, nodes, batch):
    req = PlanSpec.load({**BASE, "job_id": "catalogued", "nodes": nodes,
                         "workload": {"training": {"model": name, "batch": batch}}})
    try:
        model = workloads.check_training(req)
    except workloads.WorkloadInputError as exc:
        assert exc.loc in {("nodes",), ("workload", "training", "model"), ("workload", "training", "batch")}
        return
    assert nodes <= workloads.TRAINING_MAX_NODES
    assert model.gradient_bytes > 0 and model.buckets_bytes == sorted(set(model.buckets_bytes))
    assert workloads.has_alltoall(req) == any(layer.is_moe for layer in model.layers)


def test_alltoall_beyond_the_limits_is_a_recorded_refusal(settings, monkeypatch):
    """A topology beyond the all-to-all LP's limits (here its node limit), or a build that reaches the task's
    time limit, does not fail the plan: the stage records the refusal with the reason, and
    GET .../schedules/alltoall answers 409 with it."""
    from celery.exceptions import SoftTimeLimitExceeded
    from fastapi.testclient import TestClient

    from services.jobs.kinds.plan import alltoall as alltoall_plans
    from services.api.app import create_app
    from services.store import repo
    from services.store.db import migrate, session_scope

    migrate(settings.sqlalchemy_url)
    req = {**BASE, "job_id": unique_job(), "nodes": 1100,
           "workload": {"collective": "allgather", "sizes_bytes": [1024], "alltoall_bytes": 1 << 20}}
    with session_scope(settings.sqlalchemy_url) as s:
        pid = repo.create_plan(s, req, None)[0].id
    out = alltoall_plans.stage_alltoall({"selected": {"expr": "ring(1100)"}, "schedules": {}}, pid)
    a2a = out["alltoall"]
    assert a2a["status"] == "refused" and "1024 nodes" in a2a["reason"] and "alltoall" not in out["schedules"]

    def too_slow(topology):
        raise SoftTimeLimitExceeded("soft time limit")

    monkeypatch.setattr(alltoall_plans, "alltoall_schedule", too_slow)
    slow = alltoall_plans.stage_alltoall({"selected": {"expr": "torus(4, 4)"}, "schedules": {}}, pid)["alltoall"]
    assert slow["status"] == "refused" and "FABRICPLAN_TASK_TIME_LIMIT_S" in slow["reason"]
    with session_scope(settings.sqlalchemy_url) as s:
        assert repo.plan_artifact(s, pid, "schedule:alltoall") is None
        repo.finish(s, pid, {"alltoall": a2a})
    with TestClient(create_app(settings)) as c:
        assert c.get(f"/v1/plans/{pid}").json()["alltoall"] == {**a2a, "url": None, "times_us": {}, **{
            k: None for k in alltoall_plans.REPORTED if k != "expr"}}
        for path in ("", "/loads"):
            r = c.get(f"/v1/plans/{pid}/schedules/alltoall{path}")
            assert r.status_code == 409 and a2a["reason"] in r.json()["detail"]
