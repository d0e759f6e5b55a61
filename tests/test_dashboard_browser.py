"""The dashboard in a real browser: Playwright for Python driving Debian's headless Chromium (tests/browser.py)
against the service running in this process (uvicorn in a thread on a free port; SQLite and the embedded
worker) with API keys required, real plans (planned by the worker), a registered fabric with one plan bound
to it, and 1,000 more plans in the database.

Every page is loaded and photographed at 1280x800 into build/dashboard-screenshots/ (git-ignored); each test
fails on a console error, an uncaught exception or a request that leaves 127.0.0.1. The module's tests share
one server and one browser (an xdist group: scripts/dev test runs pytest with --dist loadgroup).
"""
from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from . import browser

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "build" / "dashboard-screenshots"
SKIP = browser.skip_reason()
pytestmark = [pytest.mark.skipif(SKIP is not None, reason=SKIP or ""), pytest.mark.xdist_group("dashboard-browser")]

BULK_PLANS = 1000
TIMEOUT_MS = 20_000


class LiveServer:
    """create_app(settings) under uvicorn in a daemon thread; `app` is the live application object."""

    def __init__(self, settings):
        import uvicorn

        from services.api.app import create_app

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(settings)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    access_log=False, loop="asyncio"))   # as `fabricplan serve`
        self.thread = threading.Thread(target=self.server.run, name="dashboard-test-server", daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 120   # a loaded machine starts the worker pool slowly
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=15)


def _wait_done(http: httpx.Client, pid: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        p = http.get(f"/v1/plans/{pid}").json()
        if p["status"] in ("done", "failed"):
            assert p["status"] == "done", p["reason"]
            return p
        assert time.monotonic() < deadline, f"plan {pid} still {p['status']}"
        time.sleep(0.05)


def _plan(http: httpx.Client, **over) -> dict:
    body = {"job_id": "dash-" + uuid.uuid4().hex[:6], "nodes": 16, "degree": 4, "alpha_us": 10, "bandwidth_gbps": 100,
            "workload": {"collective": "allreduce", "sizes_bytes": [1024, 1 << 20, 1 << 28]}, **over}
    r = http.post("/v1/plans", json=body)
    assert r.status_code == 202, r.text
    return _wait_done(http, r.json()["id"])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The running service with its data: keys, a fabric, a bound plan, other plans, 1,000 bulk plans."""
    from services.api.auth import create_key
    from services.config import Settings, get_settings
    from services.store.db import session_scope
    from services.store.models import Plan

    data = tmp_path_factory.mktemp("dashboard")
    with pytest.MonkeyPatch.context() as mp:
        # the embedded worker reads the process settings (services.config.get_settings)
        mp.setenv("FABRICPLAN_DATA_DIR", str(data))
        mp.setenv("FABRICPLAN_DATABASE_URL", f"sqlite:///{data / 'fabricplan.db'}")
        mp.setenv("FABRICPLAN_API_KEYS_REQUIRED", "true")
        mp.setenv("FABRICPLAN_SWEEP_S", "3600")      # jobs are sent when woken (POST), not by the periodic sweep
        mp.delenv("FABRICPLAN_BROKER_URL", raising=False)
        get_settings.cache_clear()
        settings = Settings()
        with LiveServer(settings) as server:
            with session_scope(settings.sqlalchemy_url) as s:
                scheduler, _ = create_key(s, "dashboard-test scheduler", "scheduler")
                viewer, _ = create_key(s, "dashboard-test viewer", "viewer")
                agent, _ = create_key(s, "dashboard-test agent", "agent", panel_id="f1-plane0")
            http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {scheduler}"}, timeout=60)
            r = http.post("/v1/fabrics", json={"id": "f1", "layout": "planes", "hosts": 32, "ports_per_host": 4,
                                               "panel_prefix": "f1-plane"})
            assert r.status_code == 201, r.text
            bound = _plan(http, fabric_id="f1")
            small = _plan(http, nodes=12, degree=3, workload={"collective": "allgather", "sizes_bytes": [4096]})
            moe = _plan(http, workload={"training": {"model": "switch-base-128"}})
            with session_scope(settings.sqlalchemy_url) as s:
                template = s.get(Plan, bound["id"])
            browser.insert_plan_copies(settings.sqlalchemy_url, template, BULK_PLANS)
            yield {"server": server, "http": http, "settings": settings, "viewer": viewer, "agent": agent,
                   "bound": bound, "small": small, "moe": moe}
            http.close()
        get_settings.cache_clear()


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        b = browser.launch(pw)
        yield b
        b.close()


@pytest.fixture
def page(chromium, site):
    """A fresh tab with the viewer key already in its session storage (test_key_is_asked_once covers the
    dialog that puts it there)."""
    context = chromium.new_context(viewport=browser.VIEWPORT)
    context.add_init_script(f"sessionStorage.setItem('fabricplan.apiKey', {json.dumps(site['viewer'])})")
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    watch = browser.PageWatch(pg)
    yield pg, watch
    context.close()
    watch.assert_clean()


def show(pg, site, hash_: str, shot: str | None = None):
    """Open a view and wait until it has rendered (main[data-ready=true] and no error box)."""
    target = f"{site['server'].url}/#{hash_}"
    if pg.url.split("#")[0] == target.split("#")[0]:
        pg.evaluate("h => { location.hash = h; }", hash_)
    else:
        pg.goto(target)
    pg.wait_for_function("h => location.hash === '#' + h && document.querySelector('#view').dataset.ready === 'true'",
                         arg=hash_)
    errors = pg.locator("#view [role=alert]")
    assert errors.count() == 0, errors.all_inner_texts()
    if shot:
        pg.screenshot(path=str(SHOTS / f"{shot}.png"))


# ----- tests --------------------------------------------------------------------------------------------------
def test_key_is_asked_once_and_every_page_loads(chromium, site):
    """With keys required the first request asks for a key; a viewer key is enough for every page, and it
    is kept for the tab's session (across views and a reload). Each page photographed at 1280x800."""
    context = chromium.new_context(viewport=browser.VIEWPORT)
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    watch = browser.PageWatch(pg)
    pg.goto(site["server"].url + "/")
    dialog = pg.locator("#key-dialog")
    dialog.wait_for(state="visible")
    pg.fill("#key-input", site["viewer"])
    pg.click("#key-ok")
    pg.wait_for_function("document.querySelector('#view').dataset.ready === 'true'")
    assert pg.locator("#plan-table tbody tr").count() == 50
    bound, small = site["bound"]["id"], site["small"]["id"]
    for hash_, shot in [("/plans", "plans"), (f"/plans/{bound}", "plan"), (f"/plans/{bound}/frontier", "plan-frontier"),
                        (f"/plans/{bound}/topology", "topology"), (f"/plans/{bound}/schedule", "schedule"),
                        ("/frontier?nodes=64&degree=4", "frontier"), ("/topology?expr=ring(6%2C%202)", "evaluate"),
                        (f"/plans/{small}", "plan-small"), ("/fabrics", "fabrics")]:
        show(pg, site, hash_, shot)
        assert not dialog.is_visible()
    pg.reload()
    pg.wait_for_function("document.querySelector('#view').dataset.ready === 'true'")
    assert not dialog.is_visible(), "the key was asked for again after a reload"
    health = pg.locator("#health")
    health.locator("[data-health=queue]").wait_for()
    assert "ready" in health.inner_text()
    for path, selector, shot in [("/docs", ".swagger-ui .opblock", "docs"), ("/redoc", ".menu-content", "redoc")]:
        pg.goto(site["server"].url + path)
        pg.locator(selector).first.wait_for()
        pg.screenshot(path=str(SHOTS / f"{shot}.png"))
    context.close()
    watch.assert_clean()
    assert any("/dashboard/vendor/swagger-ui/" in u for u in watch.requests)
    assert any("/dashboard/vendor/redoc/" in u for u in watch.requests)


def test_frontier_chart_has_one_mark_per_entry(page, site):
    pg, _ = page
    api = site["http"].get("/v1/frontiers", params={"nodes": 64, "degree": 4}).json()
    show(pg, site, "/frontier?nodes=64&degree=4&alpha_us=10&bandwidth_gbps=100&collective=allgather")
    pg.locator("#view .grid2").first.screenshot(path=str(SHOTS / "frontier-charts.png"))   # docs/dashboard-frontier.png
    chart = pg.locator("#frontier-chart")
    assert chart.locator("g.frontier-entry circle").count() == len(api["entries"]) >= 2
    assert chart.locator("g.frontier-selected circle").count() == 1
    assert chart.locator("g.frontier-bound line").count() == 2          # the Moore and bandwidth bounds
    titles = chart.locator("g.frontier-entry circle title").all_text_contents()
    assert sorted(t.split("\n")[0] for t in titles) == sorted(e["expr"] for e in api["entries"])
    assert pg.locator("#time-chart g.time-line path").count() == len(api["entries"])
    first = chart.locator("g.frontier-entry circle").first
    first.hover()
    tip = chart.locator("g[aria-label=tip]")
    tip.wait_for()
    assert any(e["expr"] in tip.text_content() for e in api["entries"])
    assert pg.locator("#view table tbody tr").count() == len(api["entries"])
    # a plan's frontier: its choice is the ringed entry
    bound = site["bound"]
    show(pg, site, f"/plans/{bound['id']}/frontier")
    chart = pg.locator("#frontier-chart")
    assert chart.locator("g.frontier-entry circle").count() == len(bound["frontier"])
    assert pg.locator("#view table tbody tr.selected").get_attribute("data-expr") == bound["topology"]["expr"]


def test_time_model_matches_the_service(page, site):
    """The frontier's time chart computes T = steps * alpha + tau * M/B in the browser: the same numbers as
    services.synthesis.schedule.cost.LinkModel.collective_time."""
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.schedule.ir import Collective

    pg, _ = page
    show(pg, site, "/plans")
    cases = [(c, e["steps"], e["tau"], size) for c in ("allgather", "allreduce") for e in site["bound"]["frontier"]
             for size in (1024, 3 << 20, 1 << 30)]
    got = pg.evaluate("""async (cases) => {
        const m = await import('./dashboard/js/cost.js');
        const model = m.linkModel(7.5, 200);
        return cases.map(([c, steps, tau, size]) => m.collectiveTime_s(model, c, steps, tau, size));
    }""", cases)
    link = LinkModel.from_units(7.5, 200)
    want = [link.collective_time(Collective.parse(c), steps, tau, size) for c, steps, tau, size in cases]
    assert got == pytest.approx(want, rel=1e-12)


def test_topology_drawing_has_n_nodes_and_nd_arcs(page, site):
    pg, _ = page
    bound = site["bound"]
    topo = site["http"].get(f"/v1/plans/{bound['id']}/topology").json()
    show(pg, site, f"/plans/{bound['id']}/topology")
    svg = pg.locator("#topology-drawing svg.topology")
    n, d = topo["nodes"], topo["degree"]
    assert svg.locator("circle.node").count() == n
    arcs = svg.locator("path.arc")
    assert arcs.count() == n * d
    drawn = arcs.evaluate_all("ps => ps.map(p => [+p.dataset.tail, +p.dataset.head, +p.dataset.lane, +p.dataset.permutation, p.getAttribute('stroke')])")
    assert [a[:3] for a in drawn] == topo["arcs"]
    assert [a[3] for a in drawn] == topo["permutation"]
    colour = {}
    for *_, perm, stroke in drawn:
        colour.setdefault(perm, set()).add(stroke)
    assert len(colour) == d and all(len(s) == 1 for s in colour.values())
    assert len({next(iter(s)) for s in colour.values()}) == d              # one colour per permutation
    counts = pg.locator("#distance-chart g[aria-label=bar] rect").count()
    assert counts == bound["topology"]["diameter"] == len(bound["topology"]["distance_counts"])


def test_parallel_arcs_and_self_loops_are_drawn_apart(page, site):
    pg, _ = page
    show(pg, site, "/topology?expr=ring(6%2C%202)&collective=allgather")
    arcs = pg.locator("#topology-drawing path.arc")
    assert pg.locator("#topology-drawing circle.node").count() == 6 and arcs.count() == 12
    paths = arcs.evaluate_all("ps => ps.map(p => [p.dataset.tail + '>' + p.dataset.head, p.getAttribute('d')])")
    by_pair = {}
    for pair, d in paths:
        by_pair.setdefault(pair, set()).add(d)
    assert len(by_pair) == 6 and all(len(ds) == 2 for ds in by_pair.values())   # lanes 0 and 1 differ
    assert "steps" in pg.locator("#topology-summary").inner_text()
    show(pg, site, "/topology?expr=debruijn(2%2C%203)")
    loops = pg.locator("#topology-drawing path.arc").evaluate_all(
        "ps => ps.filter(p => p.dataset.tail === p.dataset.head).map(p => p.getAttribute('d'))")
    assert len(loops) == 2                                                     # 000 -> 000 and 111 -> 111
    for d in loops:                                                            # a closed loop, not a dot
        start = re.match(r"M([-\d.]+),([-\d.]+)", d).groups()
        assert d.rstrip().endswith(f"{start[0]},{start[1]}") and " C" in d


def test_schedule_heat_map(page, site):
    pg, _ = page
    bound = site["bound"]
    steps = bound["schedules"]["allreduce"]["steps"]
    show(pg, site, f"/plans/{bound['id']}/schedule?collective=allreduce")
    arcs = 16 * 4
    assert pg.locator("#heat-map g.load-cell rect").count() == steps * arcs
    assert pg.locator("#step-max g.step-max rect").count() == steps
    loads = site["http"].get(f"/v1/plans/{bound['id']}/schedules/allreduce/loads").json()
    text = pg.locator("#view").inner_text()
    assert f"tau from these loads\n{loads['tau']:.6g}" in text or f"tau from these loads\t{loads['tau']:.6g}" in text
    assert loads["tau"] == pytest.approx(bound["schedules"]["allreduce"]["tau"])
    show(pg, site, f"/plans/{bound['id']}/schedule?collective=allgather&columns=16", "schedule-grouped")
    assert pg.locator("#heat-map g.load-cell rect").count() == bound["schedules"]["allgather"]["steps"] * 16
    assert "maximum of 4 consecutive arcs" in pg.locator("#view").inner_text()


def test_training_plan_shows_every_entry_and_its_alltoall_schedule(page, site):
    """A training plan's page: one stacked bar per entry and part (compute, exposed allreduce, all-to-all), a
    table row per entry with the chosen one marked, the all-to-all schedule's card, and its heat map."""
    pg, _ = page
    moe = site["moe"]
    t = moe["training"]
    show(pg, site, f"/plans/{moe['id']}", "plan-training")
    assert pg.locator("#training-chart g.iteration-bar rect").count() == 3 * len(t["entries"])
    assert pg.locator("#plan-training tbody tr").count() == len(t["entries"])
    chosen = pg.locator(f"#plan-training tr[data-kind=frontier][data-expr='{t['best']}']")
    assert "(chosen)" in chosen.inner_text()
    assert pg.locator("#plan-training tbody tr[data-kind=baseline]").count() == len(moe["baselines_time_us"])
    card = pg.locator("#plan-alltoall").inner_text()
    assert moe["alltoall"]["tau_exact"] in card and "MCF bound" in card
    show(pg, site, f"/plans/{moe['id']}/schedule?collective=alltoall", "schedule-alltoall")
    assert pg.locator("#heat-map g.load-cell rect").count() == moe["schedules"]["alltoall"]["steps"] * 16 * 4
    assert "block (D/N bytes)" in pg.locator("#view").inner_text()


def test_panel_table_shows_the_api_versions_and_updates(page, site):
    pg, _ = page
    http = site["http"]
    show(pg, site, "/fabrics")
    panels = http.get("/v1/panels", params={"fabric_id": "f1"}).json()
    assert len(panels) == 4
    for p in panels:
        row = pg.locator(f"#fabrics tr[data-panel='{p['id']}']")
        cells = row.locator("td").all_inner_texts()
        assert cells[3] == str(p["version"]) and cells[4] == str(p["applied_version"])
        assert f"+{p['pending_add']} / -{p['pending_remove']}" in cells
    assert pg.locator(f"#fabrics tr[data-plan-id='{site['bound']['id']}']").count() == 1
    # the agent of f1-plane0 applies its latest version: the page shows it without a reload
    plane0 = next(p for p in panels if p["id"] == "f1-plane0")
    cfg = http.get("/v1/panels/f1-plane0/config").json()
    r = httpx.put(f"{site['server'].url}/v1/panels/f1-plane0/state", headers={"Authorization": f"Bearer {site['agent']}"},
                  json={"applied_version": plane0["version"], "status": "applied",
                        "connections": [{"ingress": c["ingress"], "egress": c["egress"]} for c in cfg["cross_connects"]]})
    assert r.status_code == 200, r.text
    row = pg.locator("#fabrics tr[data-panel='f1-plane0']")
    pg.wait_for_function("v => document.querySelector(\"#fabrics tr[data-panel='f1-plane0']\")?.dataset.applied === v",
                         arg=str(plane0["version"]))
    assert "+0 / -0" in row.inner_text() and "applied" in row.inner_text()
    row.locator("a").first.click()
    pg.locator("#panel-detail h2").first.wait_for()
    assert "pending diff to version" in pg.locator("#panel-detail").inner_text()
    pg.screenshot(path=str(SHOTS / "fabrics-after-report.png"))


def test_plan_list_updates_when_a_plan_finishes(page, site):
    """A plan accepted but not yet started shows as queued; when the worker finishes it the list shows done."""
    from services.store import repo
    from services.store.db import session_scope

    pg, _ = page
    show(pg, site, "/plans")
    with session_scope(site["settings"].sqlalchemy_url) as s:
        plan, _ = repo.create_plan(s, {**site["small"]["request"], "job_id": "dash-live"}, None)
        pid = plan.id
    row = pg.locator(f"#plan-table tr[data-plan-id='{pid}']")
    row.wait_for()
    assert row.get_attribute("data-status") == "queued"
    site["server"].app.state.dispatcher.wake()        # what POST /v1/plans does after queueing it
    pg.wait_for_function(f"document.querySelector(\"#plan-table tr[data-plan-id='{pid}']\")?.dataset.status === 'done'")
    assert "dash-live" in row.inner_text()


def test_lists_paginate_with_a_thousand_plans(page, site):
    pg, _ = page
    total = int(site["http"].get("/v1/plans", params={"limit": 1}).headers["X-Total-Count"])
    assert total >= BULK_PLANS
    t0 = time.perf_counter()
    show(pg, site, "/plans?page=3")
    shown = time.perf_counter() - t0
    assert pg.locator("#plan-table tbody tr").count() == 50
    assert pg.locator(f".pager [data-total='{total}']").inner_text() == f"151-200 of {total}"
    show(pg, site, "/plans?status=failed")
    failed = int(site["http"].get("/v1/plans", params={"status": "failed", "limit": 1}).headers["X-Total-Count"])
    assert failed == BULK_PLANS // 10
    assert pg.locator("#plan-table tbody tr[data-status=failed]").count() == 50
    assert shown < 10, f"the plan list took {shown:.1f} s with {total} plans"
