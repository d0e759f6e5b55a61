"""The dashboard pictures in docs/ (docs/operations.md, "The dashboard"), made again from a live service:

    python -m bench.dashboard_screenshots            # writes docs/dashboard-*.png (the files listed in SHOTS)
    python -m bench.dashboard_screenshots --out DIR  # somewhere else

Starts the service (embedded: SQLite in a temporary directory and the in-process worker, `python -m services.cli
serve` on a free loopback port), seeds it through the API with the same few plans every time (N = 16, d = 4 plans
of which one loses two links and is on revision 2; an N = 12, d = 3 plan; an MoE training plan), then opens each
view in headless Chromium (tests/browser.py: Debian's chromium driven by Playwright, 1280x800, requests only to
127.0.0.1) and photographs the element SHOTS names. Exit code 2 when Chromium or Playwright is missing, 1 when a
view shows an error, a console error is logged or a picture is over MAX_BYTES.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from bench.service import ROOT, embedded_server

MAX_BYTES = 300_000
PLAN_TIMEOUT_S = 600.0


def _body(**over) -> dict:
    return {"job_id": f"docs-{uuid.uuid4().hex[:6]}", "nodes": 16, "degree": 4, "alpha_us": 10, "bandwidth_gbps": 100,
            "workload": {"collective": "allreduce", "sizes_bytes": [1024, 1 << 20, 1 << 28]}, **over}


def _wait(client: httpx.Client, url: str) -> dict:
    deadline = time.monotonic() + PLAN_TIMEOUT_S
    while (job := client.get(url).json())["status"] not in ("done", "failed"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} still {job['status']} after {PLAN_TIMEOUT_S:.0f} s")
        time.sleep(0.1)
    if job["status"] != "done":
        raise RuntimeError(f"{url} failed: {job.get('reason')}")
    return job


def _plan(client: httpx.Client, **over) -> dict:
    r = client.post("/v1/plans", json=_body(**over))
    r.raise_for_status()
    return _wait(client, f"/v1/plans/{r.json()['id']}")


def seed(client: httpx.Client) -> dict[str, str]:
    """The plans the pictures show; their ids by role."""
    first = _plan(client)
    revised = _plan(client)
    for tail, head, _ in client.get(f"/v1/plans/{revised['id']}/topology").json()["arcs"][:2]:
        r = client.post(f"/v1/plans/{revised['id']}/failures", json={"links": [{"arc": f"{tail}>{head}"}], "repair": False})
        r.raise_for_status()
        _wait(client, r.json()["url"])
    small = _plan(client, nodes=12, degree=3, workload={"collective": "allgather", "sizes_bytes": [4096]})
    moe = _plan(client, workload={"training": {"model": "switch-base-128"}})
    return {"first": first["id"], "revised": revised["id"], "small": small["id"], "moe": moe["id"]}


def shots(ids: dict[str, str]) -> list[tuple[str, str, str]]:
    """(file, view, element to photograph) for each picture."""
    three = ",".join([ids["first"], ids["revised"], ids["small"]])
    return [
        ("dashboard-frontier.png", "/frontier?nodes=64&degree=4&alpha_us=10&bandwidth_gbps=100&collective=allgather",
         "#view .grid2"),
        ("dashboard-frontier-bounds.png", "/frontier?nodes=64&degree=2", "#frontier-chart"),
        ("dashboard-revisions.png", f"/plans/{ids['revised']}", "viewport"),
        ("dashboard-baselines.png", f"/plans/{ids['revised']}", "#baseline-chart"),
        ("dashboard-training.png", f"/plans/{ids['moe']}", "#training-chart"),
        ("dashboard-compare.png", f"/compare?plans={three}&collective=allreduce", "viewport"),
        ("dashboard-compare-frontiers.png", f"/compare?plans={ids['first']},{ids['revised']}",
         "#compare-frontier-chart"),
    ]


def photograph(base: str, todo: list[tuple[str, str, str]], out: Path) -> list[str]:
    """Each view opened and its element photographed into `out`; the problems found."""
    from playwright.sync_api import sync_playwright

    from tests import browser

    problems = []
    with sync_playwright() as pw:
        b = browser.launch(pw)
        page = b.new_page(viewport=browser.VIEWPORT)
        page.set_default_timeout(int(PLAN_TIMEOUT_S * 1000))
        watch = browser.PageWatch(page)
        for name, view, element in todo:
            page.goto(f"{base}/#{view}")
            page.reload()
            page.wait_for_function("h => location.hash === '#' + h && document.querySelector('#view').dataset.ready === 'true'",
                                   arg=view)
            errors = page.locator("#view [role=alert]").all_inner_texts()
            if errors:
                problems.append(f"{view}: {errors}")
            path = out / name
            if element == "viewport":
                page.screenshot(path=str(path))
            else:
                target = page.locator(element).first
                target.scroll_into_view_if_needed()
                target.screenshot(path=str(path))
            size = path.stat().st_size
            print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {size / 1000:.0f} kB", file=sys.stderr)
            if size > MAX_BYTES:
                problems.append(f"{name} is {size} bytes (at most {MAX_BYTES})")
        b.close()
        problems += watch.errors + [f"left 127.0.0.1: {u}" for u in watch.outside]
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dashboard_screenshots", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="directory of the pictures (default: docs/)")
    args = ap.parse_args(argv)
    skip = __import__("tests.browser", fromlist=["skip_reason"]).skip_reason()
    if skip:
        print(f"bench.dashboard_screenshots: {skip}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fabricplan-screenshots-") as tmp:
        with embedded_server(Path(tmp)) as (client, base, _server):
            problems = photograph(base, shots(seed(client)), args.out.resolve())
    for p in problems:
        print(f"bench.dashboard_screenshots: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
