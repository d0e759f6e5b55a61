"""GET /metrics: job, stage and compile durations, queue depth by kind, workers alive, revisions by cause,
panel reports by status; and under `serve --workers 2` one consistent set of numbers whichever process
answers the scrape (prometheus_client's multiprocess mode: counters never go back)."""
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
    found = samples(client.get("/metrics").text)
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
    found = samples(client.get("/metrics").text)
    assert value(found, "fabricplan_revisions_total", kind="failure", cause="scheduler") >= 1


def test_two_processes_give_one_consistent_count(tmp_path):
    """`serve --workers 2`: each scrape (a new connection, so either process may answer) reports every
    request counted so far by both processes, so the counters only grow."""
    env = service_env(tmp_path)
    stale = tmp_path / "prometheus"
    stale.mkdir()
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
