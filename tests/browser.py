"""Headless Chromium for the dashboard's browser tests (and bench/dashboard.py): Playwright for Python drives
the distribution's Chromium (Debian's `chromium` package, /usr/bin/chromium; scripts/dev test installs it
when it is missing and it runs as root). Playwright's own browser download is never used.

Chromium is started with the background-networking switches off, so the only requests it makes are the
page's; `PageWatch` records every request and console error of a page, and aborts any request that would
leave 127.0.0.1 (after recording it, so a test can fail on it).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

CHROMIUM = os.environ.get("FABRICPLAN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
VIEWPORT = {"width": 1280, "height": 800}
LOCAL_HOSTS = {"127.0.0.1"}


def skip_reason() -> str | None:
    """Why browser tests cannot run here, or None when they can."""
    if not Path(CHROMIUM).is_file() or not os.access(CHROMIUM, os.X_OK):
        return (f"no Chromium at {CHROMIUM}: `scripts/dev test` installs Debian's chromium (apt-get install -y "
                "chromium) when it runs as root; otherwise install it, or set FABRICPLAN_CHROMIUM")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"Playwright for Python is not importable ({exc}); `scripts/dev test` installs the pinned version"
    return None


def launch(playwright):
    """Debian's Chromium, headless, with a fresh profile (Playwright makes a temporary user-data-dir)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)


class PageWatch:
    """Console errors, uncaught exceptions and every requested URL of one page; requests to anything but
    127.0.0.1 (or data:/blob: URLs) are recorded in `outside` and aborted."""

    def __init__(self, page):
        self.page = page
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.outside: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text} ({m.location})"))
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        self.requests.append(url)
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob") or parts.hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def assert_clean(self) -> None:
        assert not self.outside, f"requests left 127.0.0.1: {self.outside}"
        assert not self.errors, "\n".join(self.errors)


def insert_plan_copies(url: str, template, count: int) -> None:
    """`count` finished plans in one insert, copies of `template` (a real plan's row: its request and result,
    without its fabric binding); every tenth is failed instead. For pages that must stay responsive with a
    thousand plans in the database."""
    import uuid

    from sqlalchemy import insert

    from services.store.db import session_scope
    from services.store.models import Plan

    request = {**template.request, "fabric_id": None}
    result = {**template.result, "fabric": None}
    rows = []
    for i in range(count):
        failed = i % 10 == 9
        rows.append({"id": uuid.uuid4().hex, "job_id": f"bulk-{i:04d}", "request_hash": "0" * 64, "request": request,
                     "status": "failed" if failed else "done", "stage": "schedule" if failed else "done",
                     "progress": 0.4 if failed else 1.0, "result": None if failed else result,
                     "reason": "schedule: a copied failure for the list" if failed else None})
    with session_scope(url) as s:
        s.execute(insert(Plan), rows)


def insert_topology_plan(url: str, template, expr: str) -> str:
    """A finished plan whose topology is `expr`, for the topology page at sizes a test cannot afford to plan
    (a 1024-node plan takes minutes on a loaded machine): the topology built by the library, its BFB
    allgather schedule model-checked for the topology block's steps and tau (as an evaluation computes
    them), the stored JSON artifact as the planner writes it (arcs, Konig permutations); the rest of the
    request copied from `template`, with no schedules. Returns the plan id."""
    import json
    import uuid

    from sqlalchemy import insert

    from services.jobs.stages.artifacts import topology_facts, topology_json
    from services.store import repo
    from services.store.db import session_scope
    from services.store.models import Plan
    from services.synthesis.bfb.lp import bfb_allgather
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.schedule.report import schedule_summary
    from services.synthesis.schedule.verify import verify
    from services.synthesis.topology.catalog import build

    t = build(expr)
    report = verify(bfb_allgather(t, workers=1).schedule, t)
    assert report.ok, report.violation.message
    summary = schedule_summary(t, report, 0.0, Collective.ALLGATHER)
    topology = {**{k: summary[k] for k in ("steps", "tau", "tau_exact", "bw_optimal", "moore_optimal")},
                "expr": t.expr, "nodes": t.nodes, "degree": t.degree, **topology_facts(t)}
    pid = uuid.uuid4().hex
    request = {**template.request, "fabric_id": None, "nodes": t.nodes, "degree": t.degree}
    result = {**template.result, "fabric": None, "topology": topology, "frontier": None, "schedules": None,
              "predicted_time_us": None, "baselines_time_us": None, "compiled": None}
    with session_scope(url) as s:
        s.execute(insert(Plan), [{"id": pid, "job_id": f"topology-{t.nodes}", "request_hash": "1" * 64,
                                  "request": request, "status": "done", "stage": "done", "progress": 1.0,
                                  "result": result, "reason": None}])
        repo.attach(s, pid, "topology", repo.put_blob(s, json.dumps(topology_json(t)).encode(), "topology",
                                                      "application/json"), {"nodes": t.nodes, "degree": t.degree})
    return pid
