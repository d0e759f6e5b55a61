"""GET /metrics: job, stage and compile durations observed when they end, queue depth by kind, workers alive,
revisions by cause, panel reports by status; every known series at 0 before its first event; OpenMetrics on
request; a scrape that issues the same statements whatever the history; and under `serve --workers 2` one
consistent set of numbers whichever process answers the scrape (prometheus_client's multiprocess mode:
counters never go back), with the same families as a single process."""
from __future__ import annotations

import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import HANG_S, MINIMAL, unique_job, wait_done
from tests.served import service_env, served

ROOT = Path(__file__).resolve().parents[2]


def samples(text: str) -> dict[tuple, float]:
    """(name, sorted labels) -> value of every sample."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: dict, name: str, **labels) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def families(text: str) -> set[str]:
    return {fam.name for fam in text_string_to_metric_families(text)}


def scraped_until(client, holds, timeout: float = HANG_S) -> dict:
    """The first scrape whose samples satisfy `holds` (an embedded job process hands its observations to the
    API process over its pipe: they arrive just after the job's status commits)."""
    deadline = time.monotonic() + timeout
    while True:
        found = samples(client.get("/metrics").text)
        if holds(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def bare_client(settings):
    """The app without its lifespan (no dispatcher, worker or change feed issuing statements of their own)."""
    from fastapi.testclient import TestClient

    from services.api.app import create_app

    return TestClient(create_app(settings))


def test_job_queue_worker_and_panel_metrics(client):
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    assert wait_done(client, pid)["status"] == "done"
    r = client.get(f"/v1/plans/{pid}/schedules/allreduce", params={"format": "msccl", "runtime": "rccl"})
    assert r.status_code in (200, 202)
    deadline = time.monotonic() + HANG_S
    while r.status_code == 202 and time.monotonic() < deadline:
        time.sleep(0.1)
        r = client.get(f"/v1/plans/{pid}/schedules/allreduce", params={"format": "msccl", "runtime": "rccl"})
    assert r.status_code == 200
    found = scraped_until(client, lambda f: (value(f, "fabricplan_compile_duration_seconds_count", runtime="rccl",
                                                   status="done") or 0) >= 1)
    for kind in ("plan", "evaluation", "revision", "compile"):
        assert value(found, "fabricplan_queue_depth", kind=kind) is not None, kind
    assert value(found, "fabricplan_job_duration_seconds_count", kind="plan", status="done") >= 1
    assert value(found, "fabricplan_job_duration_seconds_bucket", kind="plan", status="done", le="+Inf") >= 1
    stages = {dict(k[1])["stage"] for k in found if k[0] == "fabricplan_plan_stage_duration_seconds_count"}
    assert {"frontier", "schedule", "compile"} <= stages, stages
    assert value(found, "fabricplan_compile_duration_seconds_count", runtime="rccl", status="done") >= 1
    assert value(found, "fabricplan_workers_alive") == 1          # the embedded worker of this app

    # panel reports by status, revisions by cause
    client.post("/v1/fabrics", json={"id": "mf", "layout": "planes", "hosts": 16, "ports_per_host": 4})
    panel = client.get("/v1/panels", params={"fabric_id": "mf"}).json()[0]["id"]
    version = client.get(f"/v1/panels/{panel}/config").json()["version"]
    assert client.put(f"/v1/panels/{panel}/state", json={"applied_version": version, "status": "applied"}
                      ).status_code == 200
    found = samples(client.get("/metrics").text)
    assert value(found, "fabricplan_panel_reports_total", status="applied") >= 1
    arc = client.get(f"/v1/plans/{pid}/topology").json()["arcs"][0]
    assert client.post(f"/v1/plans/{pid}/failures", json={"links": [{"arc": f"{arc[0]}>{arc[1]}"}]}
                       ).status_code in (200, 202)
    found = samples(client.get("/metrics").text)           # counted in this process, at the report's commit
    assert value(found, "fabricplan_revisions_total", kind="failure", cause="scheduler") >= 1


def test_a_plan_ending_is_observed_once(client):
    """The plan's duration and each of its stages' are observed once, when the plan ends (not rebuilt from its
    events at the scrape)."""
    before = samples(client.get("/metrics").text)
    count = "fabricplan_job_duration_seconds_count"
    pid = client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
    assert wait_done(client, pid)["status"] == "done"
    stages = {e["stage"] for e in client.get(f"/v1/plans/{pid}/events").json() if e.get("duration_s") is not None}
    assert {"frontier", "schedule", "compile"} <= stages, stages

    def stage_counts(found):
        return {st: value(found, "fabricplan_plan_stage_duration_seconds_count", stage=st) for st in stages}
    after = scraped_until(client, lambda f: value(f, count, kind="plan", status="done")
                          == value(before, count, kind="plan", status="done") + 1
                          and all(stage_counts(f)[st] == (stage_counts(before)[st] or 0) + 1 for st in stages))
    assert value(after, count, kind="plan", status="done") == value(before, count, kind="plan", status="done") + 1
    assert stage_counts(after) == {st: (n or 0) + 1 for st, n in stage_counts(before).items()}
    assert value(after, count, kind="plan", status="failed") == value(before, count, kind="plan", status="failed")
    def ended(found):
        return {k: v for k, v in found.items() if k[0].startswith(("fabricplan_job_", "fabricplan_plan_stage_"))}
    assert ended(after) == ended(samples(client.get("/metrics").text))   # scraping again counts nothing more
    assert value(after, "fabricplan_job_duration_seconds_bucket", kind="plan", status="done", le="+Inf") == \
        value(after, count, kind="plan", status="done")


def test_every_counter_starts_at_zero(settings):
    """Before any event, every labelled counter and histogram has its known series (Grafana's rate() panels
    draw 0, not nothing); the app's own counters read 0."""
    from services.api.metrics import PANEL_STATUSES
    from services.store.job_metrics import JOB_KINDS, OUTCOMES, PLAN_STAGES, REVISION_CAUSES

    found = samples(bare_client(settings).get("/metrics").text)
    assert value(found, "fabricplan_plans_created_total") == 0
    for status in PANEL_STATUSES:
        assert value(found, "fabricplan_panel_reports_total", status=status) == 0, status
    for kind, cause in REVISION_CAUSES:
        assert value(found, "fabricplan_revisions_total", kind=kind, cause=cause) is not None, (kind, cause)
    for kind in JOB_KINDS:
        for status in OUTCOMES:
            assert value(found, "fabricplan_job_duration_seconds_count", kind=kind, status=status) is not None
    for stage in PLAN_STAGES:
        assert value(found, "fabricplan_plan_stage_duration_seconds_count", stage=stage) is not None, stage
    for runtime in ("executor", "rccl", "legacy", "oneccl"):
        assert value(found, "fabricplan_compile_duration_seconds_count", runtime=runtime, status="done") is not None
    assert not [k for k in found if k[0].endswith("_created")]


def test_openmetrics_on_request(settings):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

    c = bare_client(settings)
    c.get("/healthz")
    r = c.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8, "
                                             "text/plain;version=0.0.4;q=0.5"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/openmetrics-text"), r.headers
    assert r.text.endswith("# EOF\n")
    om = {fam.name for fam in openmetrics_families(r.text)}
    plain = c.get("/metrics")
    assert plain.headers["content-type"].startswith("text/plain; version=0.0.4") and "# EOF" not in plain.text
    assert om == families(plain.text) and "fabricplan_job_duration_seconds" in om
    assert c.get("/metrics", headers={"Accept": "text/plain"}).headers["content-type"].startswith("text/plain")


def test_a_scrape_costs_the_same_whatever_the_history(settings):
    """The statements one scrape issues are the same at 10 and at 500 finished plans (with their events and
    compiles), each a count of state, none over the plans' events: the histograms come from observations,
    not the history."""
    from sqlalchemy import event

    from bench.metrics import seed
    from services.store.db import engine_for

    c = bare_client(settings)
    engine = engine_for(settings.sqlalchemy_url)

    def statements() -> list[str]:
        seen: list[str] = []

        def record(conn, cursor, statement, *_):
            seen.append(statement)
        event.listen(engine, "before_cursor_execute", record)
        try:
            assert c.get("/metrics").status_code == 200
        finally:
            event.remove(engine, "before_cursor_execute", record)
        return seen

    seed(settings.sqlalchemy_url, 10)
    at10 = statements()
    seed(settings.sqlalchemy_url, 490)
    at500 = statements()
    assert at10 == at500 and at10
    assert not [s for s in at500 if "plan_events" in s or "count(" not in s], at500     # counts of state only
    found = samples(c.get("/metrics").text)
    assert value(found, "fabricplan_plans", status="done") == 500


def test_two_processes_give_one_consistent_count(tmp_path, settings):
    """`serve --workers 2`: each scrape (a new connection, so either process may answer) reports every
    request counted so far by both processes, so the counters only grow; its families are a single
    process's; a plan's end, observed by the process whose worker ran it, is in every scrape."""
    single = bare_client(settings)
    single.get("/healthz")
    single_families = families(single.get("/metrics").text)
    env = service_env(tmp_path / "served")
    stale = tmp_path / "served" / "prometheus"
    stale.mkdir(parents=True)
    (stale / "counter_999999.db").write_bytes(b"left by an earlier run")     # cleaned by serve

    def both_up(base):                             # both processes up: each reports its embedded worker
        return value(samples(httpx.get(f"{base}/metrics", timeout=30).text), "fabricplan_workers_alive") == 2

    with served(env, "--workers", "2", ready=both_up) as (base, _):
        sent = 0
        assert not (stale / "counter_999999.db").exists()
        counted = []
        for round_ in range(12):
            for _ in range(5):
                assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200   # one connection each
                sent += 1
            found = samples(httpx.get(f"{base}/metrics", timeout=30).text)
            counted.append(value(found, "fabricplan_http_request_seconds_count", method="GET", route="/healthz",
                                 status="200"))
        assert counted == sorted(counted), counted                          # never a reset
        assert counted[-1] == sent, (counted, sent)                          # every process's requests
        writers = {p.name.split("_")[-1] for p in stale.glob("histogram_*.db")}
        assert len(writers) == 2, writers                                    # both processes answered some
        text = httpx.get(f"{base}/metrics", timeout=30).text
        assert families(text) == single_families, families(text) ^ single_families
        assert "fabricplan_job_duration_seconds" in single_families
        assert not [k for k in samples(text) if k[0].endswith("_created")]     # no `<family>_created` series

        with httpx.Client(base_url=base, timeout=30) as c:
            pid = c.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"]
            plan = wait_done(c, pid)
            assert plan["status"] == "done", str(plan)[:4000]      # the plan's own account if it failed
        done = {"name": "fabricplan_job_duration_seconds_count", "kind": "plan", "status": "done"}
        deadline = time.monotonic() + HANG_S
        while value(samples(httpx.get(f"{base}/metrics", timeout=30).text), **done) != 1 \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(6):                                   # new connections: either process answers
            assert value(samples(httpx.get(f"{base}/metrics", timeout=30).text), **done) == 1


def test_grafana_dashboard_charts_exported_metrics():
    import json
    import re

    from services.api import metrics
    from services.store import job_metrics

    dash = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    names = {re.sub(r"_(bucket|count|sum|total)$", "", n) for e in exprs for n in re.findall(r"fabricplan_\w+", e)}
    source = Path(metrics.__file__).read_text() + Path(job_metrics.__file__).read_text()
    missing = [n for n in names if f'"{n}"' not in source and f'"{n}_total"' not in source]
    assert names and not missing, missing
