"""Metrics benchmark: does a scrape of /metrics cost the same whatever the history the database holds?

    python -m bench.metrics                      # 10, 1,000 and 10,000 finished plans, 20 scrapes each
    python -m bench.metrics --plans 10 100 --runs 5

Creates the app (embedded settings, a fresh SQLite file in a temp dir, migrated) and, for each count in turn,
adds finished plans to the same database (`seed`: each plan with its stage events, start and end of every
stage, and three done compile jobs; bulk inserts of a few thousand rows a statement), then times GET /metrics
through the app (FastAPI's TestClient, no network; the app's lifespan is not run, so no worker competes for
the CPU): the median and the fastest of `--runs` scrapes, the SQL statements one scrape issues, and the
size of the answer. The scrape reads counters and histograms observed when work ended plus the database's
state in a constant number of queries (services.api.metrics), so the columns should not grow with the plans.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

STAGES = ("frontier", "select", "schedule", "verify", "store", "compile")
RUNTIMES = ("executor", "rccl", "legacy")
BATCH = 2000


def seed(url: str, plans: int) -> None:
    """Add `plans` done plans (16 nodes, degree 4) with their stage events (queued, a start and an end event per
    stage, done) and three done compile jobs each, in batches of BATCH rows."""
    from sqlalchemy import insert

    from services.store.db import session_scope
    from services.store.models import CompileJob, Plan, PlanEvent

    request = {"job_id": "bench", "nodes": 16, "degree": 4, "alpha_us": 10, "bandwidth_gbps": 100,
               "workload": {"collective": "allreduce", "sizes_bytes": [1048576]}}
    t0 = datetime.now(timezone.utc) - timedelta(hours=1)
    plan_rows, event_rows, compile_rows = [], [], []

    def flush(force: bool = False) -> None:
        if not force and len(event_rows) < BATCH:
            return
        with session_scope(url) as s:
            for model, rows in ((Plan, plan_rows), (PlanEvent, event_rows), (CompileJob, compile_rows)):
                if rows:
                    s.execute(insert(model), rows)
                    rows.clear()

    for i in range(plans):
        pid = uuid.uuid4().hex
        at = t0 + timedelta(seconds=i * 0.01)
        plan_rows.append(dict(id=pid, job_id=f"bench-{i}", request_hash=pid, request=request, status="done",
                              stage="done", progress=1.0, attempts=1, result={"expr": "circulant(16,[1,2])"},
                              created_at=at, updated_at=at + timedelta(seconds=2), owner="scheduler:bench"))
        event_rows.append(dict(plan_id=pid, at=at, status="queued", stage="queued", progress=0.0))
        t = at
        for stage in STAGES:
            end = t + timedelta(seconds=0.25)
            event_rows.append(dict(plan_id=pid, at=t, status="running", stage=stage, progress=0.5, started_at=t))
            event_rows.append(dict(plan_id=pid, at=end, status="running", stage=stage, progress=0.5, started_at=t,
                                   ended_at=end, duration_s=0.25, message=f"{stage} took 0.25 s"))
            t = end
        event_rows.append(dict(plan_id=pid, at=t, status="done", stage="done", progress=1.0, message="plan complete"))
        for runtime in RUNTIMES:
            compile_rows.append(dict(id=uuid.uuid4().hex, plan_id=pid, collective="allreduce", options=runtime,
                                     spec={"runtime": runtime}, status="done", stage="done", attempts=1,
                                     meta={"runtime": runtime, "seconds": 0.1}, created_at=at, updated_at=t))
        flush()
    flush(force=True)


def scrape_stats(client, engine, runs: int) -> dict:
    """Median and fastest wall time of `runs` GET /metrics, statements and bytes of the last one."""
    from sqlalchemy import event

    statements = []

    def count(*_):
        statements.append(1)
    event.listen(engine, "before_cursor_execute", count)
    times = []
    try:
        for _ in range(runs):
            statements.clear()
            t = time.perf_counter()
            r = client.get("/metrics")
            times.append(time.perf_counter() - t)
            assert r.status_code == 200, r.text
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return {"median_ms": 1000 * statistics.median(times), "min_ms": 1000 * min(times),
            "statements": len(statements), "bytes": len(r.content)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, nargs="+", default=[10, 1000, 10000],
                    help="finished plans in the database at each measurement (increasing)")
    ap.add_argument("--runs", type=int, default=20, help="scrapes timed at each count (the median is reported)")
    args = ap.parse_args(argv)
    if sorted(args.plans) != args.plans or args.plans[0] < 0:
        ap.error("--plans: increasing counts from 0")
    from fastapi.testclient import TestClient

    from services.api.app import create_app
    from services.config import Settings
    from services.store.db import engine_for, migrate

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'fabricplan.db'}"
        migrate(url)
        client = TestClient(create_app(Settings(data_dir=Path(tmp), database_url=url, broker_url=None)))
        client.get("/metrics")                       # imports and first connection out of the timings
        print(f"{'plans':>8} {'seed s':>7} {'median ms':>10} {'min ms':>7} {'SQL/scrape':>10} {'bytes':>7}")
        have = 0
        for n in args.plans:
            t = time.perf_counter()
            seed(url, n - have)
            seeded, have = time.perf_counter() - t, n
            st = scrape_stats(client, engine_for(url), args.runs)
            print(f"{n:>8} {seeded:>7.1f} {st['median_ms']:>10.2f} {st['min_ms']:>7.2f} {st['statements']:>10} "
                  f"{st['bytes']:>7}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
