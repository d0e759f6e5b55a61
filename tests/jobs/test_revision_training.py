"""A failure revision of a training plan prices the training iteration on the degraded topology
(services.jobs.stages.revision_cost.training_cost): the plan's model, link model and best bucket with the revision's
served allreduce and re-planned all-to-all, compared with the plan's chosen iteration (its
`chosen_with_alltoall_schedule`). Runs on SQLite and PostgreSQL (the `client` fixture)."""
from __future__ import annotations

from fractions import Fraction

import pytest

from services.synthesis.evaluate.iteration import CollectiveCost, TopologyCosts, best_bucket
from services.synthesis.evaluate.training_job import parse_model_spec

from tests.api.test_revisions import wait_revision
from tests.api.test_training_plans import LINK, MOE_SPEC, _plan


def test_moe_training_revision_reprices_the_iteration(client):
    p = _plan(client, {"model_spec": MOE_SPEC, "parallelism": {"data": 16, "expert": 16}})
    assert p["alltoall"]["status"] == "built" and p["training"]["moe_layers"] == 1
    base = f"/v1/plans/{p['id']}"
    arcs = client.get(f"{base}/topology").json()["arcs"]
    t, h, _ = next(a for a in arcs if a[0] != a[1])
    rev = wait_revision(client, client.post(f"{base}/failures", json={"links": [{"arc": f"{t}>{h}"}]}).json()["url"])
    assert rev["status"] == "done", rev["reason"]
    tr = rev["failure_cost"]["training"]
    # independently: the plan's model on the revision's served allreduce and its verified all-to-all
    ar, a2a = rev["schedules"]["allreduce"], rev["alltoall"]
    assert a2a["status"] == "built"
    costs = TopologyCosts(rev["expr"], 16, 4, CollectiveCost(ar["steps"], Fraction(ar["tau_exact"])), None,
                          CollectiveCost(a2a["steps"], Fraction(a2a["tau_exact"])))
    want = best_bucket(parse_model_spec(MOE_SPEC), costs, LINK)
    assert tr["expr"] == rev["expr"] and tr["iteration_s"] == pytest.approx(want.iteration_s, rel=1e-12)
    assert (tr["bucket_bytes"], tr["alltoall_s"]) == (want.bucket_bytes, pytest.approx(want.alltoall_s, rel=1e-12))
    assert (tr["allreduce"]["tau_exact"], tr["alltoall"]["source"]) == (ar["tau_exact"], "schedule")
    # every all-to-all of the iteration (two each way per MoE layer) costs what failure_cost.alltoall reports
    d = str(MOE_SPEC["layers"][2]["moe_tokens_bytes"])
    assert want.alltoalls == 4 and tr["alltoall_s"] == pytest.approx(
        4 * rev["failure_cost"]["alltoall"][d]["after_us"] * 1e-6, rel=1e-9)
    # against the plan's chosen iteration with its verified all-to-all schedule: a failed link costs time
    before = p["training"]["chosen_with_alltoall_schedule"]
    assert tr["before"] == "chosen_with_alltoall_schedule" and tr["iteration_s_before"] == before["iteration_s"]
    assert tr["slowdown"] == pytest.approx(tr["iteration_s"] / before["iteration_s"]) and tr["slowdown"] >= 1 - 1e-9
    # without a schedule the bracket's charged end prices it (its lower throughput), and a refusal prices nothing
    from services.jobs.requests.plan_spec import PlanSpec
    from services.jobs.stages.revision_cost import training_cost

    req, f = PlanSpec.load(p["request"]), a2a["mcf_throughput"]
    bracket = {"status": "approximate", "mcf_lower": f, "mcf_upper": f * 1.004}
    got = training_cost(req, p["training"], rev["expr"], rev["schedules"], bracket)
    mcf = best_bucket(parse_model_spec(MOE_SPEC), TopologyCosts(rev["expr"], 16, 4, costs.allreduce, f), LINK)
    assert got["iteration_s"] == pytest.approx(mcf.iteration_s, rel=1e-12) and got["alltoall"]["throughput"] == f
    assert got["alltoall_s"] <= tr["alltoall_s"] * (1 + 1e-9)          # the MCF bound is no slower than a schedule
    refused = training_cost(req, p["training"], rev["expr"], rev["schedules"], {"status": "refused", "reason": "x"})
    assert refused["iteration_s"] is None and refused["slowdown"] is None and refused["reason"].endswith("x")
