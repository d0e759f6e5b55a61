"""Metrics observed when work ends (services.store.job_metrics): delivered when the transaction that ends the
work commits, never for one rolled back; every known series at 0 before its first observation."""
from __future__ import annotations

import pytest

from services.store import job_metrics, repo
from services.store.db import migrate, session_scope

from tests.conftest import BACKENDS, MINIMAL, database_url, unique_job


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    u = database_url(request.param, tmp_path, "metrics", migrated=True)
    migrate(u)
    return u


@pytest.fixture
def delivered():
    seen: list[job_metrics.Observation] = []
    job_metrics.set_sink(seen.append)
    yield seen
    job_metrics.set_sink(None)


def test_a_plan_ending_is_observed_at_its_commit(url, delivered):
    with session_scope(url) as s:
        plan, _ = repo.create_plan(s, {**MINIMAL, "job_id": unique_job()}, None)
    for stage in ("frontier", "select", "schedule"):
        with session_scope(url) as s:
            assert repo.advance(s, plan.id, stage=stage, progress=0.1)
    assert [(o.family, o.labels) for o in delivered] == [
        ("fabricplan_plan_stage_duration_seconds", ("frontier",)),
        ("fabricplan_plan_stage_duration_seconds", ("select",))]
    with pytest.raises(RuntimeError):
        with session_scope(url) as s:
            assert repo.finish(s, plan.id, {"expr": "ring(16)"})
            raise RuntimeError("the transaction is rolled back")
    assert len(delivered) == 2                       # nothing from the rolled-back finish
    with session_scope(url) as s:
        assert repo.finish(s, plan.id, {"expr": "ring(16)"})
        assert len(delivered) == 2                   # not before the commit
    assert [(o.family, o.labels) for o in delivered[2:]] == [
        ("fabricplan_plan_stage_duration_seconds", ("schedule",)),
        ("fabricplan_job_duration_seconds", ("plan", "done"))]
    assert all(o.value >= 0 for o in delivered)
    with session_scope(url) as s:                    # a finished plan ends no more
        assert not repo.fail(s, plan.id, "late")
    assert len(delivered) == 4


def test_every_known_series_starts_at_zero():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    m = job_metrics.JobMetrics()
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for fam in text_string_to_metric_families(generate_latest(m.registry).decode()) for s in fam.samples}
    for f in job_metrics.FAMILIES.values():
        sample = f"{f.name}_count" if f.kind == "histogram" else f"{f.name}_total"
        for labels in f.initial():
            assert found[(sample, tuple(sorted(zip(f.labels, labels))))] == 0, (f.name, labels)
    assert not [k for k in found if k[0].endswith("_created")]
    m.observe(job_metrics.Observation("fabricplan_revisions", ("failure", "panel"), 1))
    m.observe(job_metrics.Observation("fabricplan_job_duration_seconds", ("plan", "done"), 3.0))
    text = generate_latest(m.registry).decode()
    assert 'fabricplan_revisions_total{cause="panel",kind="failure"} 1.0' in text
    assert 'fabricplan_job_duration_seconds_bucket{kind="plan",le="5.0",status="done"} 1.0' in text
    assert 'fabricplan_job_duration_seconds_bucket{kind="plan",le="2.5",status="done"} 0.0' in text


def test_the_plan_stages_are_the_stages_plans_weigh():
    from services.jobs.stages.stage_weights import FIXED_S

    assert set(job_metrics.PLAN_STAGES) == set(FIXED_S) - {"repair"}
