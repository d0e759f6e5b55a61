"""Mixed-load benchmark: schedulers, panel agents and flooding viewers at once, on one backend.

    python -m bench.mixed_load                                   # embedded: SQLite + in-process worker
    python -m bench.mixed_load --backend redis --broker redis://127.0.0.1:6379/14
                                                                 # PostgreSQL (a fresh database) + Redis + a worker

Starts the service as subprocesses with API keys required (`python -m services.cli migrate|serve|worker`,
the scaled one with a real Celery worker process), registers a fabric of 50 panels, then for `--seconds`:
  - schedulers (scheduler keys) post a small plan (N = 16, d = 4) every few seconds and time it from POST to
    done, alternating unbound plans and plans bound to the fabric (the previous bound plan is released);
  - 50 panel agents (one agent key per panel) long-poll their config (If-None-Match, ?wait=) and report
    each new version applied;
  - viewers (viewer keys) flood: download stored schedules (JSON and npz), ask for XML with distinct
    `min_bytes` (on-demand compiles), evaluate topologies and poll plans, with no pause.
It prints the 5xx count, the 429 count (the per-key job bound at work), p50/p99 per route, and the
schedulers' plan latency under the load against the target (a small plan done within 10 s while viewers
flood). Exit code 1 if a 5xx was answered or the target is missed. Talks to 127.0.0.1 only.
"""
from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import httpx

from bench.service import HOST, ROOT, Proc, child_env, cli, free_port, minimal_body, percentile, wait_ready

PLAN_TARGET_S = 10.0
PANELS = 50
ADMIN_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


class Recorder:
    """Latency and status of every request, by route template."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.errors: list[str] = []

    def call(self, client: httpx.Client, route: str, method: str, url: str, **kw) -> httpx.Response | None:
        t0 = time.perf_counter()
        try:
            r = client.request(method, url, **kw)
        except httpx.TransportError as exc:
            with self.lock:
                self.statuses[route][0] += 1
                self.errors.append(f"{route}: {type(exc).__name__}")
            return None
        with self.lock:
            self.latency[route].append(time.perf_counter() - t0)
            self.statuses[route][r.status_code] += 1
            if r.status_code >= 500:
                self.errors.append(f"{route}: {r.status_code} {r.text[:200]}")
        return r


def create_keys(url: str, panels: list[str], schedulers: int, viewers: int) -> dict:
    from services.api.auth import create_key
    from services.store.db import session_scope

    with session_scope(url) as s:
        return {"scheduler": [create_key(s, f"bench-scheduler-{i}", "scheduler")[0] for i in range(schedulers)],
                "viewer": [create_key(s, f"bench-viewer-{i}", "viewer")[0] for i in range(viewers)],
                "agent": {p: create_key(s, f"bench-agent-{p}", "agent", p)[0] for p in panels}}


def fresh_database(run_id: str) -> str:
    from sqlalchemy import create_engine, text

    name = f"fabricplan_mixed_{run_id}"
    admin = create_engine(ADMIN_DATABASE_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return ADMIN_DATABASE_URL.rsplit("/", 1)[0] + "/" + name


def drop_database(url: str) -> None:
    from sqlalchemy import create_engine, text

    admin = create_engine(ADMIN_DATABASE_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
    admin.dispose()


def wait_plan(rec: Recorder, client: httpx.Client, plan_id: str, deadline: float) -> dict:
    while True:
        r = rec.call(client, "GET /v1/plans/{id}", "GET", f"/v1/plans/{plan_id}")
        plan = r.json() if r is not None and r.status_code == 200 else {}
        if plan.get("status") in ("done", "failed") or time.monotonic() > deadline:
            return plan
        time.sleep(0.1)


def scheduler(rec: Recorder, base: str, key: str, fabric: str, stop: threading.Event, out: list, every_s: float,
              index: int) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    bound = None
    with httpx.Client(base_url=base, headers=headers, timeout=30, trust_env=False) as c:
        n = 0
        while not stop.is_set():
            body = minimal_body(f"mixed-{index}-{n}-{uuid.uuid4().hex[:6]}", 16)
            if n % 2 == 1:
                if bound is not None:
                    rec.call(c, "DELETE /v1/plans/{id}/fabric", "DELETE", f"/v1/plans/{bound}/fabric")
                body["fabric_id"] = fabric
            t0 = time.monotonic()
            r = rec.call(c, "POST /v1/plans", "POST", "/v1/plans", json=body)
            if r is not None and r.status_code in (200, 202):
                plan = wait_plan(rec, c, r.json()["id"], t0 + 120)
                out.append({"seconds": time.monotonic() - t0, "status": plan.get("status"),
                            "bound": "fabric_id" in body, "reason": plan.get("reason")})
                if "fabric_id" in body and plan.get("status") == "done":
                    bound = plan["id"]
            n += 1
            stop.wait(max(0.0, every_s - (time.monotonic() - t0)))
        if bound is not None:                             # the hosts are free for the next scheduler
            rec.call(c, "DELETE /v1/plans/{id}/fabric", "DELETE", f"/v1/plans/{bound}/fabric")


def agent(rec: Recorder, base: str, key: str, panel: str, stop: threading.Event) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    etag = None
    with httpx.Client(base_url=base, headers=headers, timeout=30, trust_env=False) as c:
        while not stop.is_set():
            h = {"If-None-Match": etag} if etag else {}
            r = rec.call(c, "GET /v1/panels/{id}/config?wait=5 (long poll)", "GET", f"/v1/panels/{panel}/config",
                         params={"wait": 5}, headers=h)
            if r is None or r.status_code == 304:
                continue
            if r.status_code != 200:
                stop.wait(0.5)
                continue
            etag = r.headers.get("etag")
            cfg = r.json()
            if cfg["applied_version"] < cfg["version"]:
                rec.call(c, "PUT /v1/panels/{id}/state", "PUT", f"/v1/panels/{panel}/state",
                         json={"applied_version": cfg["version"], "status": "applied"})


def viewer(rec: Recorder, base: str, key: str, plan_id: str, stop: threading.Event, seed: int) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    rng = random.Random(seed)
    with httpx.Client(base_url=base, headers=headers, timeout=30, trust_env=False) as c:
        while not stop.is_set():
            what = rng.randrange(6)
            coll = rng.choice(["allgather", "reducescatter", "allreduce"])
            if what == 0:
                rec.call(c, "GET /v1/plans/{id}/schedules/{c} json", "GET", f"/v1/plans/{plan_id}/schedules/{coll}")
            elif what == 1:
                rec.call(c, "GET /v1/plans/{id}/schedules/{c} npz", "GET", f"/v1/plans/{plan_id}/schedules/{coll}",
                         params={"format": "npz"})
            elif what == 2:                      # a new compile each time: the flood
                rec.call(c, "GET /v1/plans/{id}/schedules/{c} xml", "GET", f"/v1/plans/{plan_id}/schedules/{coll}",
                         params={"format": "msccl", "min_bytes": rng.randrange(1, 1 << 20)})
            elif what == 3:
                expr = rng.choice([f"ring({rng.randrange(3, 200)})", f"genkautz(4, {rng.randrange(8, 400)})",
                                   f"torus({rng.randrange(3, 20)}, {rng.randrange(3, 20)})"])
                rec.call(c, "POST /v1/topologies/evaluate", "POST", "/v1/topologies/evaluate", json={"expr": expr},
                         params={"wait": 0})
            elif what == 4:
                rec.call(c, "GET /v1/plans/{id}", "GET", f"/v1/plans/{plan_id}")
            else:
                rec.call(c, "GET /v1/stats", "GET", "/v1/stats")


def run(args) -> bool:
    run_id = uuid.uuid4().hex[:8]
    procs: list[Proc] = []
    database = None
    with tempfile.TemporaryDirectory(prefix="fabricplan-mixed-") as tmp:
        tmpdir = Path(tmp)
        data_dir = tmpdir / "data"
        data_dir.mkdir()
        env = child_env("embedded", data_dir)
        env["FABRICPLAN_API_KEYS_REQUIRED"] = "true"
        if args.backend == "redis":
            database = fresh_database(run_id)
            env["FABRICPLAN_DATABASE_URL"] = database
            env["FABRICPLAN_BROKER_URL"] = args.broker
        url = env.get("FABRICPLAN_DATABASE_URL") or f"sqlite:///{(data_dir / 'fabricplan.db').resolve()}"
        try:
            subprocess.run(cli("migrate"), env=env, cwd=ROOT, check=True, timeout=180)
            panels = [f"mx-plane{k}" for k in range(PANELS)]
            keys = create_keys(url, panels, args.schedulers, args.viewers)
            if args.backend == "redis":
                procs.append(Proc("worker", cli("worker", "--concurrency", str(args.concurrency), "--log-level",
                                                "warning", "--hostname", f"mixed-{run_id}@%h"), env, tmpdir))
            port = free_port()
            server = Proc("server", cli("serve", "--host", HOST, "--port", str(port), "--log-level", "warning"),
                          env, tmpdir)
            procs.append(server)
            base = f"http://{HOST}:{port}"
            admin = {"Authorization": f"Bearer {keys['scheduler'][0]}"}
            rec = Recorder()
            with httpx.Client(base_url=base, headers=admin, timeout=30, trust_env=False) as client:
                print(f"backend {args.backend}: ready in {wait_ready(client, server, 300):.1f} s at {base}", flush=True)
                r = client.post("/v1/fabrics", json={"id": "mx", "layout": "planes", "hosts": 16 * args.schedulers,
                                                     "ports_per_host": PANELS, "panel_prefix": "mx-plane"})
                assert r.status_code == 201, r.text
                r = client.post("/v1/plans", json=minimal_body(f"mixed-seed-{run_id}", 16))
                seed = wait_plan(rec, client, r.json()["id"], time.monotonic() + 300)
                assert seed.get("status") == "done", seed
                quiet: list = []
                stop = threading.Event()
                t = threading.Thread(target=scheduler, args=(rec, base, keys["scheduler"][0], "mx", stop, quiet, 0,
                                                             0))
                t.start()
                time.sleep(min(20.0, args.seconds / 3))
                stop.set()
                t.join(timeout=130)
                rec = Recorder()                                  # the load itself from here
                stop = threading.Event()
                plans: list = []
                threads = [threading.Thread(target=agent, args=(rec, base, keys["agent"][p], p, stop), daemon=True)
                           for p in panels]
                threads += [threading.Thread(target=viewer, args=(rec, base, k, seed["id"], stop, i), daemon=True)
                            for i, k in enumerate(keys["viewer"])]
                threads += [threading.Thread(target=scheduler, args=(rec, base, k, "mx", stop, plans, args.every,
                                                                     i + 1), daemon=True)
                            for i, k in enumerate(keys["scheduler"])]
                t0 = time.monotonic()
                for th in threads:
                    th.start()
                time.sleep(args.seconds)
                stop.set()
                for th in threads:
                    th.join(timeout=130)
                elapsed = time.monotonic() - t0
                stats = client.get("/v1/stats").json()
        finally:
            for p in reversed(procs):
                p.stop()
            if database is not None:
                drop_database(database)
    return report(args, rec, plans, quiet, elapsed, stats)


def report(args, rec: Recorder, plans: list, quiet: list, elapsed: float, stats: dict) -> bool:
    total = sum(sum(v.values()) for v in rec.statuses.values())
    five = sum(n for v in rec.statuses.values() for code, n in v.items() if code >= 500 or code == 0)
    many = sum(v.get(429, 0) for v in rec.statuses.values())
    print(f"\n{args.backend}: {total} requests in {elapsed:.0f} s of load and wind-down ({total / elapsed:.0f}/s), "
          f"{args.schedulers} schedulers, {PANELS} agents, {args.viewers} viewers")
    print(f"{'route':44} {'n':>6} {'p50 ms':>8} {'p99 ms':>8}  statuses")
    for route in sorted(rec.statuses):
        lat = sorted(rec.latency[route])
        codes = ", ".join(f"{c}: {n}" for c, n in sorted(rec.statuses[route].items()))
        print(f"{route:44} {len(lat):>6} {percentile(lat, 50) * 1e3:>8.0f} {percentile(lat, 99) * 1e3:>8.0f}  {codes}")
    done = sorted(p["seconds"] for p in plans if p["status"] == "done")
    alone = sorted(p["seconds"] for p in quiet if p["status"] == "done")
    worst = done[-1] if done else float("inf")
    print(f"\n5xx (and transport errors): {five}   (target 0)")
    print(f"429 (per-key job bound): {many}")
    print(f"scheduler's small plan (N = 16, d = 4) under the load: {len(done)} of {len(plans)} done; "
          f"median {percentile(done, 50):.2f} s, max {worst:.2f} s   (target: each within {PLAN_TARGET_S:.0f} s)")
    print(f"the same plan before the load: median {percentile(alone, 50):.2f} s ({len(alone)} plans)")
    print(f"/v1/stats after the load: queue_depth {stats.get('queue_depth')}, jobs {stats.get('jobs')}")
    for e in rec.errors[:10]:
        print("  error:", e)
    failed = [p for p in plans if p["status"] != "done"]
    for p in failed[:5]:
        print("  plan not done:", p)
    return five == 0 and not failed and worst <= PLAN_TARGET_S


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["embedded", "redis"], default="embedded")
    ap.add_argument("--broker", default="redis://127.0.0.1:6379/14", help="Redis URL (redis backend)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--schedulers", type=int, default=2)
    ap.add_argument("--viewers", type=int, default=8)
    ap.add_argument("--every", type=float, default=5.0, help="a scheduler's seconds between plans")
    ap.add_argument("--concurrency", type=int, default=2, help="the Celery worker's processes (redis backend)")
    args = ap.parse_args(argv)
    return 0 if run(args) else 1


if __name__ == "__main__":
    sys.exit(main())
