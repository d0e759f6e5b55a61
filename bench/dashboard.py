"""Dashboard benchmark: do the pages stay responsive with 1,000 plans in the database and a 2048-node plan?

    python -m bench.dashboard                    # N = 2048 (the largest plan the API takes), d = 4
    python -m bench.dashboard --nodes 1024       # a smaller big plan

Starts the service (embedded: SQLite in a temp dir + in-process worker, `python -m services.cli serve`),
plans one N-node job for real, inserts 1,000 finished plans (copies of a small real plan), then opens each
dashboard page in headless Chromium (tests/browser.py: Debian's chromium driven by Playwright) and measures
the time from navigation until the view has rendered, the server's CPU time for it, the JSON it fetched and
the size of the page's DOM. Target: every page rendered within 2 s. Talks to 127.0.0.1 only; exit code 1
when a target is missed or a page logs an error.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from bench.service import embedded_server, minimal_body

PAGE_TARGET_S = 2.0
BULK_PLANS = 1000


def server_cpu_s(pid: int) -> float:
    """utime + stime of a process (Linux /proc), in seconds."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def plan(client: httpx.Client, body: dict, timeout_s: float) -> tuple[dict, float]:
    t0 = time.perf_counter()
    pid = client.post("/v1/plans", json=body).json()["id"]
    while True:
        p = client.get(f"/v1/plans/{pid}").json()
        if p["status"] in ("done", "failed"):
            if p["status"] != "done":
                raise RuntimeError(f"plan {pid} failed: {p['reason']}")
            return p, time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout_s:
            raise RuntimeError(f"plan {pid} not done within {timeout_s:.0f} s")
        time.sleep(0.2)


def measure_pages(base: str, pages: list[tuple[str, str]], server_pid: int) -> list[dict]:
    from playwright.sync_api import sync_playwright

    from tests import browser

    rows = []
    with sync_playwright() as pw:
        b = browser.launch(pw)
        page = b.new_page(viewport=browser.VIEWPORT)
        page.set_default_timeout(60_000)
        watch = browser.PageWatch(page)
        fetched = {"bytes": 0}
        page.on("response", lambda r: "/v1/" in r.url and fetched.__setitem__("bytes", fetched["bytes"] + int(r.headers.get("content-length") or len(r.body()))))
        page.goto(base + "/#/fabrics")          # warm the browser's cache of the static files once
        page.wait_for_function("document.querySelector('#view').dataset.ready === 'true'")
        for name, hash_ in pages:
            fetched["bytes"] = 0
            cpu0, t0 = server_cpu_s(server_pid), time.perf_counter()
            page.goto(f"{base}/#{hash_}")
            page.reload()                       # a full load of the page, not a fragment change
            page.wait_for_function("document.querySelector('#view').dataset.ready === 'true'")
            wall = time.perf_counter() - t0
            rows.append({"page": name, "seconds": wall, "server_cpu_s": server_cpu_s(server_pid) - cpu0,
                         "json_kb": fetched["bytes"] / 1024, "dom_nodes": page.evaluate("document.querySelectorAll('*').length"),
                         "error": page.locator("#view [role=alert]").all_inner_texts()})
        b.close()
        watch.assert_clean()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--degree", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds for the big plan")
    args = ap.parse_args(argv)
    skip = __import__("tests.browser", fromlist=["skip_reason"]).skip_reason()
    if skip:
        print(f"bench.dashboard: {skip}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fabricplan-bench-dashboard-") as tmp:
        data = Path(tmp)
        with embedded_server(data) as (client, base, server):
            small, _ = plan(client, minimal_body(f"dash-{uuid.uuid4().hex[:6]}", 16), 120)
            cpu0 = server_cpu_s(server.popen.pid)
            big, big_s = plan(client, minimal_body(f"dash-big-{uuid.uuid4().hex[:6]}", args.nodes, args.degree),
                              args.timeout)
            big_cpu = server_cpu_s(server.popen.pid) - cpu0
            from services.store.db import session_scope
            from services.store.models import Plan
            from tests.browser import insert_plan_copies

            url = f"sqlite:///{(data / 'fabricplan.db').resolve()}"
            with session_scope(url) as s:
                template = s.get(Plan, small["id"])
            insert_plan_copies(url, template, BULK_PLANS)
            total = client.get("/v1/plans", params={"limit": 1}).headers["X-Total-Count"]
            print(f"{args.nodes}-node plan {big['topology']['expr']}: {big_s:.1f} s wall, {big_cpu:.1f} s server CPU; "
                  f"{total} plans in the database", file=sys.stderr)
            pid = big["id"]
            pages = [("plans (1,000+)", "/plans"), ("plans, page 10", "/plans?page=10"),
                     ("plans, failed", "/plans?status=failed"), (f"plan N={args.nodes}", f"/plans/{pid}"),
                     (f"frontier N={args.nodes}", f"/plans/{pid}/frontier"),
                     (f"topology N={args.nodes} (summary)", f"/plans/{pid}/topology"),
                     (f"schedule N={args.nodes} (256 columns)", f"/plans/{pid}/schedule?collective=allreduce"),
                     (f"frontier form N={args.nodes}", f"/frontier?nodes={args.nodes}&degree={args.degree}"),
                     ("fabrics", "/fabrics")]
            rows = measure_pages(base, pages, server.popen.pid)
    print(f"{'page':36} {'rendered s':>10} {'server CPU s':>12} {'JSON KiB':>9} {'DOM nodes':>9}  target")
    missed = False
    for r in rows:
        ok = r["seconds"] <= PAGE_TARGET_S and not r["error"]
        missed |= not ok
        print(f"{r['page']:36} {r['seconds']:10.2f} {r['server_cpu_s']:12.2f} {r['json_kb']:9.0f} {r['dom_nodes']:9d}  "
              f"<= {PAGE_TARGET_S:.0f} s {'ok' if ok else 'MISSED ' + '; '.join(r['error'])}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
