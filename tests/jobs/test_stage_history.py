"""A plan's progress weighs its stages by the durations the store recorded for finished plans of its kind
(services.jobs.stages.stage_history, stage_weights.corrections): a training plan's bands are the stage shares its
finished predecessor recorded, a plan of another kind in between changes nothing, and progress only moves
forward. The numbers compared are all read from the plans' own events (no wall clock)."""
from __future__ import annotations

import pytest

from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.requests.workloads import has_alltoall
from services.jobs.stages.stage_weights import (DEFAULT_CORRECTIONS, corrections, plan_kind, plan_progress,
                                                plan_stages)

from tests.conftest import MINIMAL, unique_job, wait_done
from tests.api.test_training_plans import BASE, MOE_SPEC

TOLERANCE = 1e-6
"""The bands are the recorded shares up to float rounding (one finished plan of the same size: its median is
its own ratio, times the same model cost)."""


def _run(client, body: dict) -> tuple[dict, list[dict]]:
    r = client.post("/v1/plans", json={**body, "job_id": unique_job()})
    assert r.status_code == 202, r.text
    p = wait_done(client, r.json()["id"])
    assert p["status"] == "done", p["reason"]
    return p, client.get(f"/v1/plans/{p['id']}/events").json()


def _durations(events: list[dict]) -> dict[str, float]:
    return {e["stage"]: e["duration_s"] for e in events if e["duration_s"] is not None}


def _starts(events: list[dict]) -> dict[str, float]:
    """Each stage's progress when it started (its start event: started_at set, not yet ended)."""
    out: dict[str, float] = {}
    for e in events:
        if e["started_at"] is not None and e["ended_at"] is None:
            out.setdefault(e["stage"], e["progress"])
    return out


def test_training_plan_bands_are_the_recorded_shares_of_its_kind(client):
    body = {**BASE, "workload": {"training": {"model_spec": MOE_SPEC}}}
    spec = PlanSpec.load({**body, "job_id": "kind"})
    assert plan_kind(spec, has_alltoall(spec)) == "training+alltoall"
    _, first = _run(client, body)                       # no history: the kind's defaults
    _, other = _run(client, MINIMAL)                    # another kind: not a sample for the training plans
    assert _durations(other)
    _, second = _run(client, body)

    fractions = [e["progress"] for e in second]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    recorded = _durations(first)
    stages = [name for name, _ in plan_stages(spec, True)]
    assert set(recorded) == set(stages) - {"finish"}     # every stage a plan runs is recorded; finish is not one
    # the stages' expected seconds: the recorded ones, and the model's for a stage no plan records
    model = dict(plan_stages(spec, True, {}))
    costs = [recorded.get(name, model[name]) for name in stages]
    total = sum(costs)
    starts = _starts(second)
    before = 0.0
    for name, cost in zip(stages, costs):
        if name in starts and name != "frontier":       # frontier's first update is a quarter into its band
            assert starts[name] == pytest.approx(before / total, abs=TOLERANCE), name
        before += cost
    # each stage's share of the bar (its band) is its share of the recorded durations
    order = [name for name in stages if name in starts and name != "frontier"]
    for a, b in zip(order, order[1:]):
        share = recorded[a] / total
        assert starts[b] - starts[a] == pytest.approx(share, abs=TOLERANCE), a


def test_corrections_are_the_median_ratio_per_stage():
    spec = PlanSpec.load({**MINIMAL, "job_id": "c"})
    model = dict(plan_stages(spec, False, {}))
    samples = [(spec, False, {"schedule": model["schedule"] * k, "compile": model["compile"] * 2}) for k in (1, 3, 10)]
    got = corrections(samples)
    assert got["schedule"] == pytest.approx(3.0) and got["compile"] == pytest.approx(2.0) and "verify" not in got
    # the corrected stages weigh the plan: the compile stage starts where the others' corrected costs end
    costs = plan_stages(spec, False, got)
    total = sum(c for _, c in costs)
    before = sum(c for name, c in costs[:[n for n, _ in costs].index("compile")])
    assert plan_progress(spec, False, "compile", 0.96, got) == pytest.approx(before / total)
    # no history: a training plan's select stage starts from its kind's default
    training = PlanSpec.load({**BASE, "job_id": "t", "workload": {"training": {"model_spec": MOE_SPEC}}})
    assert corrections([]) == {}
    assert dict(plan_stages(training, True))["select"] == pytest.approx(
        model["select"] * DEFAULT_CORRECTIONS["training"]["select"])
