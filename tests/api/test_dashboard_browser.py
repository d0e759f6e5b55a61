"""The dashboard in a real browser: Playwright for Python driving Debian's headless Chromium (tests/browser.py)
against the service running in this process (uvicorn in a thread on a free port; SQLite and the embedded
worker) with API keys required, real plans (planned by the worker), a registered fabric with one plan bound
to it, and 1,000 more plans in the database.

Every page is loaded and photographed at 1280x800 into build/dashboard-screenshots/ (git-ignored); each test
fails on a console error, an uncaught exception or a request that leaves 127.0.0.1. The module's tests share
one server and one browser (an xdist group: scripts/dev test runs pytest with --dist loadgroup).
"""
from __future__ import annotations

import itertools
import json
import re
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests import browser
from tests.conftest import HANG_S

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "dashboard-screenshots"
SKIP = browser.skip_reason()
pytestmark = [pytest.mark.skipif(SKIP is not None, reason=SKIP or ""), pytest.mark.xdist_group("dashboard-browser")]

BULK_PLANS = 1000
TIMEOUT_MS = int(HANG_S * 1000)             # playwright's waits: a hang guard, as every wait here
BIG_TOPOLOGY = "circulant(1024, 1, 32)"      # the adjacency heat map at 1024 nodes (3 s of BFB, no planning)


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
        deadline = time.monotonic() + HANG_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=15)


def _wait_done(http: httpx.Client, pid: str, timeout: float = HANG_S) -> dict:
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


def _fail_two_links(http: httpx.Client, pid: str, timeout: float = HANG_S) -> None:
    """Two failure reports (one link each) on a plan without a fabric: revisions 1 and 2, waited for."""
    arcs = http.get(f"/v1/plans/{pid}/topology").json()["arcs"]
    for tail, head, _ in arcs[:2]:
        r = http.post(f"/v1/plans/{pid}/failures", json={"links": [{"arc": f"{tail}>{head}"}], "repair": False})
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + timeout
        while (rev := http.get(r.json()["url"]).json())["status"] not in ("done", "failed"):
            assert time.monotonic() < deadline, f"revision {rev['number']} still {rev['status']}"
            time.sleep(0.05)
        assert rev["status"] == "done", rev["reason"]


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
            http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {scheduler}"}, timeout=HANG_S)
            r = http.post("/v1/fabrics", json={"id": "f1", "layout": "planes", "hosts": 32, "ports_per_host": 4,
                                               "panel_prefix": "f1-plane"})
            assert r.status_code == 201, r.text
            bound = _plan(http, fabric_id="f1")
            small = _plan(http, nodes=12, degree=3, workload={"collective": "allgather", "sizes_bytes": [4096]})
            moe = _plan(http, workload={"training": {"model": "switch-base-128"}})
            revised = _plan(http)
            _fail_two_links(http, revised["id"])
            with session_scope(settings.sqlalchemy_url) as s:
                template = s.get(Plan, bound["id"])
                big = browser.insert_topology_plan(settings.sqlalchemy_url, template, BIG_TOPOLOGY)
            browser.insert_plan_copies(settings.sqlalchemy_url, template, BULK_PLANS)
            yield {"server": server, "http": http, "settings": settings, "viewer": viewer, "agent": agent,
                   "bound": bound, "small": small, "moe": moe, "revised": http.get(f"/v1/plans/{revised['id']}").json(),
                   "big": big}
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
        # the router runs on hashchange, after the hash is set: until then #view is the last view, ready; mark it
        # not ready with the change, so the wait below sees the new view's own readiness
        pg.evaluate("h => { if (location.hash !== '#' + h) { document.querySelector('#view').dataset.ready = "
                    "'false'; location.hash = h; } }", hash_)
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
                        (f"/plans/{small}", "plan-small"), ("/fabrics", "fabrics"),
                        (f"/compare?plans={bound},{small}", "compare-two"), ("/compare", "compare-empty"),
                        ("/frontier", "frontier-default")]:
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


def test_hybrid_training_plan_shows_strategy_and_breakdown(page, site):
    """A hybrid-parallel training plan (8 GPUs a host): one stacked bar per entry and part (compute, bubble,
    exposed TP / PP / DP / EP / CP, the MoE host time), a table row per entry with its strategy, the chosen one
    marked."""
    pg, _ = page
    p = _plan(site["http"], nodes=8, degree=3, alpha_us=5, bandwidth_gbps=600, workload={"training": {
        "gpus_per_host": 8, "transformer_spec": {"name": "tiny", "global_batch": 64, "transformer": {
            "hidden": 1024, "layers": 8, "heads": 16, "seq_len": 512, "vocab": 32000}}}})
    t = p["training_hybrid"]
    show(pg, site, f"/plans/{p['id']}")
    parts = len(t["entries"][0]["breakdown"])
    assert parts == 8 and pg.locator("#training-hybrid-chart g.iteration-bar rect").count() == parts * len(t["entries"])
    assert "host (MoE)" in pg.locator("#training-hybrid-chart").inner_text()
    assert pg.locator("#plan-training-hybrid tbody tr").count() == len(t["entries"])
    chosen = pg.locator(f"#plan-training-hybrid tr[data-kind=frontier][data-expr='{t['best']}']")
    s = next(e for e in t["entries"] if e["expr"] == t["best"] and e["kind"] == "frontier")["parallelism"]
    assert "(chosen)" in chosen.inner_text() and f"{s['tp']} / {s['pp']} / {s['dp']} / {s['ep']}" in chosen.inner_text()
    assert "GPUs per host" in pg.locator("#view").inner_text()


def test_topoopt_plan_shows_its_rings_matchings_and_the_finders_best(page, site):
    """A plan on TopoOpt's co-optimised topology: the card gives the API's rings, matchings, iterations (the
    verified schedules', TopoOpt's model's, the finder's best) and one row per strategy TopoOpt weighed."""
    from tests.api.test_topoopt_plans import MP_SPEC

    pg, _ = page
    p = _plan(site["http"], nodes=16, degree=4, alpha_us=10, bandwidth_gbps=100,
              workload={"training": {"model_spec": MP_SPEC}}, topology={"strategy": "topoopt"})
    ts = p["topology_strategy"]
    show(pg, site, f"/plans/{p['id']}")
    card = _text_of(pg, "#plan-topology-strategy")
    assert f"{ts['allreduce_rings']} on AllReduce rings" in card and f"{ts['mp_matchings']} on model-parallel" in card
    assert ts["finder_best"] in card
    rows = pg.locator("#plan-topology-strategy tbody tr")
    assert sorted(rows.nth(i).get_attribute("data-strategy") for i in range(rows.count())) == sorted(
        s["name"] for s in ts["strategies"])

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
    show(pg, site, "/plans?page=3")
    assert pg.locator("#plan-table tbody tr").count() == 50
    assert pg.locator(f".pager [data-total='{total}']").inner_text() == f"151-200 of {total}"
    show(pg, site, "/plans?status=failed")
    failed = int(site["http"].get("/v1/plans", params={"status": "failed", "limit": 1}).headers["X-Total-Count"])
    assert failed == BULK_PLANS // 10
    assert pg.locator("#plan-table tbody tr[data-status=failed]").count() == 50


# ----- revisions, comparison, timeline, downloads, large topologies, the schedule player -------------------
def _text_of(pg, selector: str) -> str:
    return pg.locator(selector).inner_text()


def test_plan_page_shows_the_current_revision(page, site):
    """After two failed links the plan page opens on revision 2 (the current one): its topology, predicted
    times, failure cost and artifacts, not revision 0's; the selector switches to revision 1 and back to 0."""
    pg, _ = page
    http = site["http"]
    pid = site["revised"]["id"]
    revs = http.get(f"/v1/plans/{pid}/revisions").json()
    assert [r["number"] for r in revs] == [0, 1, 2] and revs[2]["current"]
    rev2 = http.get(f"/v1/plans/{pid}/revisions/2").json()
    show(pg, site, f"/plans/{pid}", "plan-revisions")
    assert pg.locator("#view").get_attribute("data-revision") == "2"
    assert pg.locator("#plan-revisions tbody tr").count() == 3
    assert pg.locator("#revision-select").input_value() == "2"
    card = pg.locator("#plan-topology[data-revision='2']")
    assert rev2["topology"]["expr"] in card.inner_text()
    assert "0→" in card.inner_text()                                       # the removed links are named
    allreduce = rev2["predicted_time_us"]["allreduce"]
    predicted = _text_of(pg, "#plan-predicted")
    from_util = pg.evaluate("async (xs) => { const u = await import('./dashboard/js/util.js'); return xs.map(u.fmtUs); }",
                            list(allreduce.values()))
    assert all(t in predicted for t in from_util)
    slowdown = rev2["failure_cost"]["workload_us"]["slowdown"]
    assert f"{slowdown:.4g} x" in _text_of(pg, "#plan-failure-cost")
    hrefs = pg.locator("#plan-artifacts a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert all("/revisions/2/" in h or h.startswith(f"#/plans/{pid}") for h in hrefs) and len(hrefs) > 10
    assert any("revision=2" in h for h in hrefs)                             # its heat maps
    # the baselines chart adds the revision's bar: one unit on the axis and every bar label
    chart = pg.locator("#baseline-chart")
    unit = chart.get_attribute("data-unit")
    labels = chart.locator("g[aria-label=text] text").all_text_contents()
    assert len(labels) == 2 + len(site["revised"]["baselines_time_us"]) and all(t.endswith(f" {unit}") for t in labels)
    assert f"({unit})" in chart.locator("g[aria-label='x-axis label'] text").text_content()
    assert chart.locator("svg").first.evaluate("s => getComputedStyle(s).fontSize") == "13px"
    # pick revision 1: a revision that is not current says so; revision 0 is the plan as made
    pg.select_option("#revision-select", "1")
    pg.wait_for_function("document.querySelector('#view').dataset.revision === '1'")
    assert "revision=1" in pg.url
    assert pg.locator("#revision-not-current").is_visible()
    assert revs[1]["expr"] in _text_of(pg, "#plan-topology[data-revision='1']")
    pg.select_option("#revision-select", "0")
    pg.wait_for_function("document.querySelector('#view').dataset.revision === '0'")
    assert site["revised"]["topology"]["expr"] in _text_of(pg, "#plan-topology[data-revision='0']")
    assert pg.locator("#plan-failure-cost").count() == 0


def test_revision_topology_and_heat_map(page, site):
    """A revision's topology page marks its failed arcs; its heat map is computed in the browser from the
    revision's schedule and topology JSON, which gives the loads the API serves for revision 0 exactly and
    the tau of revision 2's verified schedule."""
    pg, _ = page
    http = site["http"]
    pid = site["revised"]["id"]
    rev2 = http.get(f"/v1/plans/{pid}/revisions/2").json()
    show(pg, site, f"/plans/{pid}/topology?revision=2", "topology-revision")
    removed = pg.locator("#topology-drawing path.arc.removed").evaluate_all(
        "ps => ps.map(p => [+p.dataset.tail, +p.dataset.head, +p.dataset.lane])")
    assert sorted(removed) == sorted(rev2["topology"]["removed"]) and len(removed) == 2
    assert pg.locator("#topology-drawing path.arc:not(.removed)").count() == 16 * 4 - 2
    for collective in ("allgather", "allreduce"):
        api = http.get(f"/v1/plans/{pid}/schedules/{collective}/loads", params={"max_links": 40}).json()
        got = pg.evaluate("""async ([pid, c]) => {
            const m = await import('./dashboard/js/views/schedule.js');
            const api = await import('./dashboard/js/api.js');
            const [sched, topo] = await Promise.all([api.get(`v1/plans/${pid}/schedules/${c}`), api.get(`v1/plans/${pid}/topology`)]);
            return m.loadsFromSchedule(sched, topo, 40);
        }""", [pid, collective])
        for key in ("steps", "arcs", "arcs_per_column", "unit", "links", "loads", "step_max"):
            assert got[key] == api[key], key
        assert got["step_mean"] == pytest.approx(api["step_mean"]) and got["tau"] == pytest.approx(api["tau"])
    show(pg, site, f"/plans/{pid}/schedule?collective=allreduce&revision=2", "schedule-revision")
    tau = rev2["schedules"]["allreduce"]["tau"]
    assert f"tau from these loads\n{tau:.6g}" in _text_of(pg, "#view") or f"tau from these loads\t{tau:.6g}" in _text_of(pg, "#view")
    assert pg.locator("#heat-map g.load-cell rect").count() == rev2["schedules"]["allreduce"]["steps"] * (16 * 4 - 2)


def test_compare_plans_side_by_side(page, site):
    """Tick two plans in the list and press Compare; a comparison of three plans has a column each, their
    predicted times from the API (the smallest marked), and one line and bar per plan in the charts."""
    pg, _ = page
    http = site["http"]
    show(pg, site, "/plans")
    rows = pg.locator("#plan-table tbody tr")
    ids = [rows.nth(i).get_attribute("data-plan-id") for i in range(2)]
    assert pg.locator("#compare-button").is_disabled()
    for i in range(2):
        rows.nth(i).locator("input.compare-pick").check()
    pg.wait_for_timeout(2500)                                    # a refresh of the list keeps the ticks
    assert pg.locator("#plan-table input.compare-pick:checked").count() == 2
    pg.click("#compare-button")
    # the hash changes before the router's hashchange handler runs: until then #view still holds the list, ready;
    # so wait for the compare view itself to be ready
    pg.wait_for_function("document.querySelector('#view').dataset.view === 'compare' && "
                         "document.querySelector('#view').dataset.ready === 'true'")
    assert pg.locator("#compare-table thead th[data-plan-id]").evaluate_all("hs => hs.map(h => h.dataset.planId)") == ids
    plans = []
    for p in (site["bound"], site["revised"], site["small"]):      # each as it runs now: its current revision
        n = p["revision"]["current"]
        rev = http.get(f"/v1/plans/{p['id']}/revisions/{n}").json() if n else p
        plans.append({**p, "schedules": rev["schedules"], "predicted_time_us": rev["predicted_time_us"]})
    assert plans[1]["predicted_time_us"] != site["revised"]["predicted_time_us"]
    show(pg, site, "/compare?plans=" + ",".join(p["id"] for p in plans) + "&collective=allreduce", "compare")
    assert "2 (2 failed links" in pg.locator("#compare-table tr[data-row^='revision shown'] td").nth(1).inner_text()
    assert pg.locator("#compare-table thead th[data-plan-id]").count() == 3
    row = pg.locator("#compare-table tr[data-row='allreduce at 1 MiB'] td").all_inner_texts()
    want = pg.evaluate("async (xs) => { const u = await import('./dashboard/js/util.js'); return xs.map(x => x === null ? '-' : u.fmtUs(x)); }",
                       [(p["predicted_time_us"].get("allreduce") or {}).get(str(1 << 20)) for p in plans])
    assert row == want
    values = [(p["predicted_time_us"].get("allreduce") or {}).get(str(1 << 20)) for p in plans]
    fastest = min(v for v in values if v is not None)
    best = pg.locator("#compare-table tr[data-row='allreduce at 1 MiB'] td.best").all_inner_texts()
    assert best == [want[values.index(fastest)]]
    with_schedule = [p for p in plans if "allreduce" in (p["schedules"] or {})]
    assert pg.locator("#compare-time-chart g.compare-line path").count() == len(with_schedule)
    assert pg.locator("#compare-workload-chart g.compare-bar rect").count() == 3
    assert pg.locator("#compare-frontier-chart g.compare-chosen circle").count() == 3
    # the times on the lines are the plan's own served times (its ranges' time pieces) at the reported sizes
    curves = pg.evaluate("""async (plans) => {
        const m = await import('./dashboard/js/views/compare.js');
        return m.timeCurves(plans, 'allreduce');
    }""", plans)
    for p in with_schedule:
        for size, us in p["predicted_time_us"]["allreduce"].items():
            point = [c for c in curves if c["label"] == p["id"][:8] and c["size"] == int(size)]
            if point:
                assert point[0]["time_us"] == pytest.approx(us, rel=1e-9)
    show(pg, site, "/compare?plans=" + site["bound"]["id"])
    assert "Pick 2 to 4 plans" in _text_of(pg, "#compare-help")


def test_stage_timeline_durations_and_eta(page, site):
    """The plan page's stage timeline: one row per stage of the plan's making, each lasting from its first
    event to the next stage's (sub-second, from GET /events); while a plan runs, an ETA extrapolated from the
    progress."""
    from datetime import datetime

    pg, _ = page
    pid = site["bound"]["id"]
    events = site["http"].get(f"/v1/plans/{pid}/events").json()
    show(pg, site, f"/plans/{pid}", "plan-timeline")
    making = events[:next(i for i, e in enumerate(events) if e["status"] in ("done", "failed")) + 1]
    stages, starts = [], []
    for e in making:
        if not stages or stages[-1] != e["stage"]:
            stages.append(e["stage"])
            starts.append(datetime.fromisoformat(e["at"]).timestamp())
    # the API's own durations: the event closing a stage carries duration_s; a state without one (queued)
    # lasts until the next stage's first event
    recorded = {e["stage"]: e["duration_s"] for e in making if e["duration_s"] is not None}
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    want = [recorded[st] if st in recorded else gaps[i] for i, st in enumerate(stages)]
    assert "compile" in recorded and recorded["compile"] > 0
    rows = pg.locator("#plan-timeline > table tbody tr")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.stage)") == stages
    got = [float(x) for x in rows.evaluate_all("rs => rs.map(r => r.dataset.durationS)")]
    assert got == pytest.approx(want, abs=2e-3)
    assert any(0 < d < 1 for d in got), "expected a sub-second stage"
    # "done after": from the first event to the end the API recorded for the terminal event (compile included)
    end = making[-1]["ended_at"] or making[-1]["at"]
    elapsed = datetime.fromisoformat(end).timestamp() - starts[0]
    summary = pg.locator("#timeline-summary")
    assert float(summary.get_attribute("data-elapsed-s")) == pytest.approx(elapsed, abs=2e-3)
    assert elapsed >= sum(recorded.values()) - 2e-3 and summary.inner_text().startswith("done after")
    # the same rule on a plan whose compile is long (the events as services.store.stage_events records them:
    # the event closing a stage carries started_at, ended_at and duration_s; `done` closes compile)
    long = pg.evaluate("""async () => {
        const m = await import('./dashboard/js/timeline.js');
        const t0 = Date.parse('2026-01-01T00:00:00Z');
        const at = (s) => new Date(t0 + 1000 * s).toISOString();
        const ev = (t, status, stage, extra = {}) => ({at: at(t), status, stage, progress: 0, message: null,
            started_at: null, ended_at: null, duration_s: null, ...extra});
        const events = [ev(0, 'queued', 'queued'), ev(1, 'running', 'frontier', {started_at: at(1)}),
            ev(3, 'running', 'frontier', {started_at: at(1), ended_at: at(3), duration_s: 2}),
            ev(3, 'running', 'compile', {started_at: at(3)}),
            ev(43, 'done', 'compile', {started_at: at(3), ended_at: at(43), duration_s: 40})];
        const plan = {status: 'done', progress: {fraction: 1, stage: 'done'}, created_at: at(0)};
        const card = m.timelineCard(plan, events, t0 + 100000);
        return {durations: m.stageSegments(events, t0 + 100000).map(s => [s.stage, s.duration_s]),
                elapsed: +card.querySelector('#timeline-summary').dataset.elapsedS};
    }""")
    assert long["durations"] == [["queued", 1.0], ["frontier", 2.0], ["compile", 40.0]]
    assert long["elapsed"] == pytest.approx(43.0)
    assert pg.locator("#timeline-chart g.stage-bar rect").count() == sum(d > 0 for d in got)
    # a running plan: 10 s since it was queued, 25 % done -> about 30 s left
    eta = pg.evaluate("""async () => {
        const m = await import('./dashboard/js/timeline.js');
        const t0 = Date.parse('2026-01-01T00:00:00Z');
        const at = (s) => new Date(t0 + 1000 * s).toISOString();
        const events = [{at: at(0), status: 'queued', stage: 'queued', progress: 0},
                        {at: at(1.25), status: 'running', stage: 'frontier', progress: 0.05},
                        {at: at(4.5), status: 'running', stage: 'schedule', progress: 0.25}];
        const plan = {status: 'running', progress: {fraction: 0.25, stage: 'schedule'}, created_at: at(0)};
        const card = m.timelineCard(plan, events, t0 + 10000);
        document.body.append(card);
        const segs = m.stageSegments(events, t0 + 10000);
        const out = {eta: card.querySelector('#plan-eta').dataset.etaS, text: card.querySelector('#plan-eta').textContent,
                     durations: segs.map(s => s.duration_s), open: segs.map(s => s.open)};
        card.remove();
        return out;
    }""")
    assert float(eta["eta"]) == pytest.approx(30.0) and "30.00 s" in eta["text"]
    assert eta["durations"] == pytest.approx([1.25, 3.25, 5.5]) and eta["open"] == [False, False, True]


def test_xml_not_compiled_yet_shows_a_spinner_then_downloads(page, site):
    """Clicking a runtime the plan did not compile: no raw 202 page, a spinner while the worker compiles
    (the page polls the URL the 202 gave), then the file downloads."""
    pg, _ = page
    bound = site["bound"]
    show(pg, site, f"/plans/{bound['id']}")
    url = pg.url
    link = pg.locator("#plan-artifacts a[data-runtime=oneccl][data-collective=allreduce]")
    with pg.expect_download(timeout=TIMEOUT_MS) as dl:
        link.click()
        spin = pg.locator("#plan-artifacts [data-compiling]")
        spin.wait_for()
        assert "compiling oneccl XML" in spin.inner_text()
        pg.locator("#plan-artifacts").screenshot(path=str(SHOTS / "plan-compiling.png"))
    download = dl.value
    assert download.suggested_filename == f"{bound['id']}-allreduce-oneccl.xml"
    body = Path(download.path()).read_text()
    assert body.lstrip().startswith("<") and "</" in body
    assert pg.url == url and pg.locator("#plan-artifacts [data-compiling]").count() == 0
    r = site["http"].get(f"/v1/plans/{bound['id']}/schedules/allreduce", params={"format": "oneccl"})
    assert r.status_code == 200 and r.text == body


def test_fabric_card_has_cost_and_ready_estimate(page, site):
    pg, _ = page
    http = site["http"]
    bound = site["bound"]
    show(pg, site, f"/plans/{bound['id']}")
    fabric = http.get(f"/v1/plans/{bound['id']}").json()["fabric"]
    cost = pg.locator("#fabric-cost")
    assert float(cost.get_attribute("data-plan-usd")) == fabric["cost"]["plan_usd"]
    assert float(cost.get_attribute("data-fabric-usd")) == fabric["cost"]["fabric_usd"]
    assert f"${round(fabric['cost']['plan_usd']):,}" in cost.inner_text()
    assert float(pg.locator("#fabric-ready-estimate").get_attribute("data-seconds")) == fabric["ready_estimate_s"]
    show(pg, site, "/fabrics")
    whole = http.get("/v1/fabrics/f1/cost").json()
    assert float(pg.locator("[data-fabric=f1] .fabric-cost").get_attribute("data-usd")) == whole["total_usd"]


def test_topology_of_1024_nodes_is_an_adjacency_heat_map(page, site):
    """Beyond 64 nodes the topology is a matrix on a canvas: at 1024 nodes 3 nodes a cell, every arc's cell
    painted and the others white; hovering names a cell, clicking a row lists the node's neighbours."""
    pg, _ = page
    pid = site["big"]
    topo = site["http"].get(f"/v1/plans/{pid}/topology").json()
    show(pg, site, f"/plans/{pid}/topology", "topology-1024")
    canvas = pg.locator("#topology-matrix canvas.adjacency")
    width = int(canvas.get_attribute("data-bin-width"))
    assert canvas.get_attribute("data-nodes") == "1024" and width == 3
    cells = {(u // width, v // width) for u, v, _ in topo["arcs"]}
    assert int(canvas.get_attribute("data-cells")) == len(cells)
    painted = canvas.evaluate("""(c, cells) => {
        const ctx = c.getContext('2d');
        const bins = +c.dataset.bins, px = c.width / bins;
        const white = ([i, j]) => { const d = ctx.getImageData(j * px + px / 2, i * px + px / 2, 1, 1).data; return d[0] > 250 && d[1] > 250 && d[2] > 250; };
        let blank = 0;
        for (let i = 0; i < bins; i += 7) for (let j = 0; j < bins; j += 5) if (i !== j && white([i, j])) blank++;
        return {unpainted: cells.filter(white).length, blank};
    }""", sorted(cells))
    assert painted["unpainted"] == 0 and painted["blank"] > 0
    box = canvas.bounding_box()
    canvas.hover(position={"x": 1, "y": 1})                                   # cells are 2 px: bin 0
    assert "tail 0-2 → head 0-2" in _text_of(pg, "#adjacency-readout")
    canvas.click(position={"x": 1, "y": 1})
    out0 = sorted({v for u, v, _ in topo["arcs"] if u == 0})
    assert all(str(v) in _text_of(pg, "#adjacency-detail") for v in out0)
    assert box["width"] <= 720


def test_schedule_view_labels_plays_and_traces(page, site):
    """The schedule view: each of the 64 links labelled tail -> head; the player outlines a step and colours
    the links busy in it; the trace of a chunk lists the links that carry it in each step."""
    pg, _ = page
    http = site["http"]
    bound = site["bound"]
    pid = bound["id"]
    sched = http.get(f"/v1/plans/{pid}/schedules/allreduce").json()
    loads = http.get(f"/v1/plans/{pid}/schedules/allreduce/loads").json()
    show(pg, site, f"/plans/{pid}/schedule?collective=allreduce")
    ticks = pg.locator("#heat-map g[aria-label='x-axis tick label'] text").all_text_contents()
    assert ticks == [f"{l['tail']}→{l['head']}" + (f"'{l['lane']}" if l["lane"] else "") for l in loads["links"]]
    player = pg.locator("#step-player")
    assert player.get_attribute("data-step") == "1"
    pg.click("#step-player button:has-text('step ▶')")
    assert player.get_attribute("data-step") == "2"
    busy = {(u, v, l) for _, u, v, l, _, _ in sched["steps"][1]["transfers"]}
    drawn = pg.locator("#step-drawing path.arc").evaluate_all(
        "ps => ps.filter(p => +p.dataset.load > 0).map(p => [+p.dataset.tail, +p.dataset.head, +p.dataset.lane])")
    assert {tuple(x) for x in drawn} == busy
    assert pg.locator("#heat-map g.step-layer rect").count() == 1
    pg.click("#step-play")
    pg.wait_for_function("document.querySelector('#step-player').dataset.step === '3'")
    pg.click("#step-play")                                                     # pause
    shard, chunk = 3, 1
    pg.fill("#trace-shard", str(shard))
    pg.fill("#trace-chunk", str(chunk))
    pg.click("#trace-form button")
    want = [sum(1 for s, _, _, _, lo, hi in st["transfers"] if s == shard and lo <= chunk < hi) for st in sched["steps"]]
    rows = pg.locator("#trace-table tbody tr")
    assert [int(x) for x in rows.evaluate_all("rs => rs.map(r => r.dataset.moves)")] == want
    assert pg.locator("#heat-map rect.trace-cell").count() == sum(want)
    assert rows.last.locator("td").last.inner_text() == "16 of 16"              # the allgather phase reaches everyone
    pg.screenshot(path=str(SHOTS / "schedule-player.png"), full_page=True)


def test_frontier_without_parameters_shows_a_default(page, site):
    pg, _ = page
    api = site["http"].get("/v1/frontiers", params={"nodes": 64, "degree": 4}).json()
    show(pg, site, "/frontier")
    assert "N = 64" in _text_of(pg, "#frontier-default")
    assert pg.locator("#frontier-chart g.frontier-entry circle").count() == len(api["entries"])
    assert pg.locator("#frontier-form input[name=nodes]").input_value() == "64"


def test_cluster_view_plots_the_simulation_rows(page, site):
    """#/cluster runs a shared-cluster simulation in a worker and draws the rows the API returns: one mean and one
    p99 line per fabric, one table row per (load, fabric) with the API's mean iteration time."""
    pg, _ = page
    show(pg, site, "/cluster?servers=32&degree=4&servers_per_job=8&jobs=2%2C4&fabric=direct&fabric=fat-tree-2to1")
    body = {"servers": 32, "degree": 4, "bandwidth_gbps": 100, "servers_per_job": 8, "jobs": [2, 4],
            "fabrics": ["direct", "fat-tree-2to1"], "placement": "packed"}
    api = site["http"].post("/v1/cluster/simulations", json=body).json()     # the same request: its stored rows
    assert api["status"] == "done"
    rows = pg.locator("#view table tbody tr")
    assert rows.count() == len(api["results"]) == 4
    for i, r in enumerate(api["results"]):
        row = rows.nth(i)
        assert (row.get_attribute("data-jobs"), row.get_attribute("data-fabric")) == (str(r["jobs"]), r["fabric"])
        assert float(row.get_attribute("data-mean")) == r["mean_iteration_s"]
    chart = pg.locator("#cluster-chart")
    assert chart.locator("g.cluster-mean path").count() == 2 and chart.locator("g.cluster-p99 path").count() == 2


def _strip_panels(pg) -> tuple[int, int]:
    """(out of sync, panels) as the health strip shows them."""
    text = pg.locator("[data-health=panels]").inner_text()
    out, total = re.search(r"(\d+)\s*/\s*(\d+)", text).groups()
    return int(out), int(total)


def test_panel_states_and_the_health_strip_follow_the_api(page, site):
    """A panel whose last report is `degraded` shows that state, not a green "applied"; panels with no
    cross-connects to hold (a fabric no plan uses) are not counted as out of sync by the health strip."""
    pg, _ = page
    http = site["http"]
    show(pg, site, "/fabrics")
    pg.wait_for_function("() => /\\d+\\s*\\/\\s*\\d+/.test(document.querySelector('[data-health=panels]')?.innerText)")
    before, total = _strip_panels(pg)
    r = http.post("/v1/fabrics", json={"id": "idle", "layout": "planes", "hosts": 8, "ports_per_host": 2,
                                       "panel_prefix": "idle-plane"})
    assert r.status_code == 201, r.text
    idle = http.get("/v1/panels", params={"fabric_id": "idle"}).json()
    assert len(idle) == 2 and all(p["cross_connects"] == 0 and p["status"] is None for p in idle)
    assert http.get("/v1/stats").json()["panels_out_of_sync"] == before
    pg.wait_for_function("n => (document.querySelector('[data-health=panels]')?.innerText || '').includes('/ ' + n)",
                         arg=str(total + 2), timeout=TIMEOUT_MS)
    assert _strip_panels(pg) == (before, total + 2)

    # a degraded report: the version applied, one port dark
    panel = idle[0]
    r = http.put(f"/v1/panels/{panel['id']}/state", json={"applied_version": panel["version"], "status": "degraded",
                                                         "failed": [{"ingress": 0}], "message": "port 0 dark"})
    assert r.status_code == 200, r.text
    show(pg, site, "/fabrics")
    state = http.get("/v1/panels", params={"fabric_id": "idle"}).json()
    for p in state:
        row = pg.locator(f"#fabrics tr[data-panel='{p['id']}']")
        row.wait_for()
        badge = row.locator(".badge").first
        if p["id"] == panel["id"]:
            assert p["status"] == "degraded"
            pg.wait_for_function("id => document.querySelector(`#fabrics tr[data-panel='${id}'] .badge`)"
                                 "?.textContent === 'degraded'", arg=p["id"], timeout=TIMEOUT_MS)
            assert "applied" not in badge.get_attribute("class")
        else:
            assert p["status"] is None and badge.inner_text() == "never reported"
    pg.locator("#fabrics").screenshot(path=str(SHOTS / "fabrics-degraded.png"))


def test_topology_view_polls_an_evaluation_still_running(page, site):
    """An evaluation not finished within the server's wait answers 202: the view polls its URL and draws the
    result the API gives, not the 202 body (arcs NaN, tau undefined)."""
    pg, _ = page
    statuses = []
    # wait=0: the POST answers 202 at once whatever the machine's speed
    pg.route("**/v1/topologies/evaluate", lambda route: route.continue_(url=route.request.url + "?wait=0"))
    pg.on("response", lambda r: statuses.append(r.status) if "/v1/topologies/evaluate" in r.url else None)
    show(pg, site, "/topology?expr=ring(9%2C%202)")
    assert statuses == [202]
    got = site["http"].post("/v1/topologies/evaluate", json={"expr": "ring(9, 2)", "collective": "allgather",
                                                             "with_arcs": True}).json()
    text = pg.locator("#view").inner_text()
    assert "NaN" not in text and "undefined" not in text and "predates" not in text
    assert got["tau_exact"] in pg.locator("#topology-summary").inner_text()
    assert pg.locator("#topology-drawing circle.node").count() == got["nodes"] == 9
    assert pg.locator("#topology-drawing path.arc").count() == len(got["arcs"]) == 18
    assert pg.locator("#topology-waiting").count() == 0


# ----- chart geometry: measured in the page ------------------------------------------------------------------
_BOX = "e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"


def _tick_labels(pg, chart: str) -> list[dict]:
    """The y tick labels of the chart in `chart`: their text, full label, tooltip and box, and the svg's box."""
    return pg.locator(f"{chart} svg:has(g[aria-label='y-axis tick'])").evaluate("""svg => {
        const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
        return [...svg.querySelectorAll('g[aria-label="y-axis tick label"] text')].map((t) => ({
            text: [...t.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join(''),
            label: t.getAttribute('data-label'), title: t.querySelector('title')?.textContent ?? null,
            box: box(t), svg: box(svg) }));
    }""")


def _check_labels(labels: list[dict], want: list[str]) -> None:
    """Every label inside its svg, whole or a prefix with an ellipsis, its full text in the tooltip."""
    assert len(labels) == len(want)
    for x, full in zip(labels, want):
        left, _, right, _ = x["box"]
        assert left >= x["svg"][0] - 0.5 and right <= x["svg"][2] + 0.5, x
        assert x["text"] == full or (x["text"].endswith("…") and full.startswith(x["text"][:-1])), (x, full)
    assert [x["label"] for x in labels] == want and [x["title"] for x in labels] == want


def test_bar_chart_labels_are_inside_the_chart(page, site):
    """Long band labels (a revision's `remove(...)` topology, training entries, the compared plans) are drawn
    inside the svg: whole when the margin measured for them allows, else cut with an ellipsis, and always
    with the full label as a tooltip. The labels are the API's names."""
    pg, _ = page
    http = site["http"]
    pid = site["revised"]["id"]
    rev2 = http.get(f"/v1/plans/{pid}/revisions/2").json()
    show(pg, site, f"/plans/{pid}")
    plan = site["revised"]
    want = [f"fabricplan: {plan['topology']['expr']}", f"revision 2: {rev2['topology']['expr']}",
            *plan["baselines_time_us"]]
    assert len(want[1]) > 40                          # remove(circulant(...), a>b, c>d): long enough to cut
    _check_labels(_tick_labels(pg, "#baseline-chart"), want)
    moe = site["moe"]
    show(pg, site, f"/plans/{moe['id']}")
    t = moe["training"]
    names = [f"{e['name']} ({e['expr']})" if e["kind"] == "baseline" else
             (f"{e['expr']} (chosen)" if e["expr"] == t["best"] else e["expr"]) for e in t["entries"]]
    _check_labels(_tick_labels(pg, "#training-chart"), names)
    ids = [site["bound"]["id"], pid]
    show(pg, site, f"/compare?plans={','.join(ids)}")
    exprs = [site["bound"]["topology"]["expr"], rev2["topology"]["expr"]]
    _check_labels(_tick_labels(pg, "#compare-workload-chart"), [f"{i[:8]} {e}" for i, e in zip(ids, exprs)])


def _frame(pg, chart: str) -> dict:
    """The plot frame of a chart, from its axes: left where the y ticks end, bottom where the x ticks start."""
    return pg.locator(f"{chart} svg:has(g[aria-label='y-axis tick'])").evaluate("""svg => {
        const boxes = (sel) => [...svg.querySelectorAll(sel)].map((e) => e.getBoundingClientRect());
        const s = svg.getBoundingClientRect();
        return { left: Math.max(...boxes('g[aria-label="y-axis tick"] path').map((r) => r.right)),
                 bottom: Math.min(...boxes('g[aria-label="x-axis tick"] path').map((r) => r.top)),
                 top: s.top, right: s.right, ydomain: svg.scale('y').domain };
    }""")


def _ring_boxes(pg, selector: str) -> list[list[float]]:
    """Circles' boxes with their stroke (getBoundingClientRect leaves the stroke out)."""
    return pg.locator(selector).evaluate_all("""cs => cs.map((c) => {
        const r = c.getBoundingClientRect(); const w = parseFloat(getComputedStyle(c).strokeWidth || '0') / 2;
        return [r.left - w, r.top - w, r.right + w, r.bottom + w]; })""")


def _inside(box, frame) -> bool:
    left, top, right, bottom = box
    return left >= frame["left"] - 0.5 and right <= frame["right"] + 0.5 and top >= frame["top"] - 0.5 \
        and bottom <= frame["bottom"] + 0.5


def test_compare_frontiers_overlap_visibly_inside_the_frame(page, site):
    """Two plans with the same frontier (N = 16, d = 4): each plan's line has points where it is the topmost
    element (neither hides the other), the lines differ in dash pattern, every entry's tau is in the y domain,
    and every chosen ring is drawn inside the plot frame."""
    pg, _ = page
    bound, revised = site["bound"], site["revised"]
    assert [(e["steps"], e["tau"]) for e in bound["frontier"]] == [(e["steps"], e["tau"]) for e in revised["frontier"]]
    show(pg, site, f"/compare?plans={bound['id']},{revised['id']}")
    chart = "#compare-frontier-chart"
    visible = pg.locator(f"{chart} svg:has(g[aria-label='y-axis tick'])").evaluate("""svg => [0, 1].map((i) => {
        const path = svg.querySelectorAll('g[aria-label=line] path')[i];
        if (!path) return null;
        svg.scrollIntoView({ block: 'center' });         // elementFromPoint sees the viewport only
        const m = path.getScreenCTM(); const len = path.getTotalLength(); let top = 0; const n = 60;
        for (let k = 0; k < n; k++) {
            const p = path.getPointAtLength(len * (k + 0.5) / n);
            const q = new DOMPoint(p.x, p.y).matrixTransform(m);
            if (document.elementFromPoint(q.x, q.y) === path) top++;
        }
        return { top, n, dash: getComputedStyle(path).strokeDasharray };
    })""")
    assert None not in visible, "each plan has its own frontier line"
    for v in visible:
        assert v["top"] >= v["n"] // 4, visible              # at least a quarter of each line is on top
    assert visible[0]["dash"] != visible[1]["dash"]
    frame = _frame(pg, chart)
    lo, hi = sorted(frame["ydomain"])
    assert all(lo <= e["tau"] <= hi for p in (bound, revised) for e in p["frontier"])
    rings = _ring_boxes(pg, f"{chart} g.compare-chosen circle")
    assert len(rings) == 2 and all(_inside(r, frame) for r in rings), (rings, frame)


def _intersects(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.parametrize("nodes,degree", [(64, 4), (16, 4), (64, 2), (100, 2), (256, 4)])
def test_bound_labels_clear_every_point(page, site, nodes, degree):
    """On the steps-tau chart neither bound's label covers an entry's dot or the selected ring (boxes measured
    in the page), and every dot and ring is inside the plot frame; the entries are the API's frontier."""
    pg, _ = page
    api = site["http"].get("/v1/frontiers", params={"nodes": nodes, "degree": degree}).json()
    show(pg, site, f"/frontier?nodes={nodes}&degree={degree}")
    chart = pg.locator("#frontier-chart")
    assert chart.locator("g.frontier-entry circle").count() == len(api["entries"])
    labels = chart.locator("g[aria-label=text] text").evaluate_all(
        "ts => ts.filter((t) => /bound/.test(t.textContent)).map((t) => { const r = t.getBoundingClientRect(); "
        "return [r.left, r.top, r.right, r.bottom, t.textContent]; })")
    assert sorted(x[4].split(":")[0] for x in labels) == ["BW bound", "Moore bound"]
    points = _ring_boxes(pg, "#frontier-chart g.frontier-entry circle") + \
        _ring_boxes(pg, "#frontier-chart g.frontier-selected circle")
    for *box, text in labels:
        hit = [p for p in points if _intersects(box, p)]
        assert not hit, f"{text!r} at {box} covers points {hit}"
    frame = _frame(pg, "#frontier-chart")
    lo, hi = sorted(frame["ydomain"])
    assert all(lo <= e["tau"] <= hi for e in api["entries"])
    assert all(_inside(p, frame) for p in points), (points, frame)      # dots and the ring inside the axes
