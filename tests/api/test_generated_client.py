"""A client generated from the OpenAPI document by openapi-python-client (a pinned dev dependency), with no
hand edits, drives a running server (uvicorn on a free loopback port, embedded backend): register a fabric,
create a plan on it, wait, download the MSCCL XML, the GraphML and the npz schedule (bytes, whatever the
format), list the fabric's panels and report a panel's state. No API key: the document declares
authentication optional, so the plain `Client` works against a keyless service."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import xmlschema

from services.api import openapi_export
from services.synthesis.schedule.ir import Schedule
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build

from tests.conftest import HANG_S
from tests.served import served, service_env

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "fabricplan_client"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The client package generated from the app's current document, importable as fabricplan_client."""
    tmp = tmp_path_factory.mktemp("client")
    spec = tmp / "openapi.json"
    spec.write_text(openapi_export.render())
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "openapi_python_client", "generate", "--path", str(spec),
                           "--meta", "none", "--output-path", str(tmp / PACKAGE)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Warning" not in proc.stdout, proc.stdout[-3000:]      # every operation and response generated
    sys.path.insert(0, str(tmp))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with served(service_env(tmp_path_factory.mktemp("server"))) as (base, _):
        yield base


def _until(call, done, timeout: float = HANG_S):
    deadline = time.monotonic() + timeout
    while True:
        out = call()
        if done(out) or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def test_generated_client_drives_the_service(generated, server):
    m = importlib.import_module(f"{PACKAGE}.models")
    api = {name: importlib.import_module(f"{PACKAGE}.api.{group}.{name}") for group, names in {
        "plans": ["create_plan", "get_plan", "get_plan_schedule", "get_plan_topology"],
        "fabric": ["register_fabric", "list_panels", "get_panel_config", "report_panel_state"]}.items()
        for name in names}
    client = generated.Client(base_url=server, raise_on_unexpected_status=True, timeout=httpx.Timeout(60.0))

    # a typed request body: the fabric layout shortcut
    fab = api["register_fabric"].sync(client=client, body=m.FabricLayout(
        id="gen-f1", layout=m.FabricLayoutLayout.PLANES, hosts=16, ports_per_host=4))
    assert isinstance(fab, m.FabricSummary) and fab.id == "gen-f1" and fab.hosts == 16

    accepted = api["create_plan"].sync(client=client, body=m.PlanRequest.from_dict({
        "job_id": "gen-j1", "nodes": 16, "degree": 4, "alpha_us": 10, "bandwidth_gbps": 100,
        "fabric_id": "gen-f1", "workload": {"collective": "allreduce", "sizes_bytes": [1048576]}}))
    assert isinstance(accepted, m.PlanAccepted) and accepted.url.endswith(accepted.id)
    plan = _until(lambda: api["get_plan"].sync(accepted.id, client=client),
                  lambda p: p.status in (m.PlanOutStatus.DONE, m.PlanOutStatus.FAILED))
    assert plan.status == m.PlanOutStatus.DONE, plan.reason

    # downloads: bytes whatever the format (application/octet-stream is each one's first media type)
    xml = _until(lambda: api["get_plan_schedule"].sync(
        accepted.id, m.GetPlanScheduleCollective.ALLREDUCE, client=client, format_=m.GetPlanScheduleFormat.MSCCL),
        lambda r: not isinstance(r, m.CompileAccepted))
    text = xml.payload.read().decode()
    assert "<algo " in text and 'coll="allreduce"' in text

    graphml = api["get_plan_topology"].sync(accepted.id, client=client, format_=m.GetPlanTopologyFormat.GRAPHML)
    schema = xmlschema.XMLSchema(str(ROOT / "tests" / "schemas" / "graphml.xsd"))
    schema.validate(graphml.payload.read().decode())

    npz = api["get_plan_schedule"].sync(accepted.id, m.GetPlanScheduleCollective.ALLREDUCE, client=client,
                                        format_=m.GetPlanScheduleFormat.NPZ)
    sched = Schedule.from_bytes(npz.payload.read())
    assert verify(sched, build(plan.topology.expr)).ok

    # a typed error: an unknown collective is a documented 404 in the API's error model
    strict = generated.Client(base_url=server, timeout=httpx.Timeout(60.0))
    missing = api["get_plan_schedule"].sync("no-such-plan", m.GetPlanScheduleCollective.ALLGATHER, client=strict)
    assert isinstance(missing, m.Problem) and "not found" in missing.detail

    panels = api["list_panels"].sync(client=client, fabric_id="gen-f1")
    assert len(panels) == 4 and all(isinstance(p, m.PanelOut) for p in panels)
    panel = panels[0]
    config = api["get_panel_config"].sync_detailed(panel.id, client=client)
    assert config.status_code == 200
    version = json.loads(config.content)["version"]
    assert config.headers["etag"] == f'"{version}"'
    report = api["report_panel_state"].sync_detailed(panel.id, client=client, body=m.PanelStateIn(
        applied_version=version, status=m.PanelStateInStatus.APPLIED))
    assert report.status_code == 200, report.content
    after = [p for p in api["list_panels"].sync(client=client, fabric_id="gen-f1") if p.id == panel.id][0]
    assert after.applied_version == version


def test_generated_client_types_the_panel_agent_contract(generated, server):
    """A panel agent written against the generated client: its two calls return typed models (not Any or a
    bare dict), the long poll (If-None-Match + wait) wakes when a plan changes the panel's config, and the
    state reports make the plan fabric_ready (DESIGN 4.6-4.7)."""
    import inspect
    import threading

    m = importlib.import_module(f"{PACKAGE}.models")
    api = {name: importlib.import_module(f"{PACKAGE}.api.{group}.{name}") for group, names in {
        "plans": ["create_plan", "get_plan"],
        "fabric": ["register_fabric", "list_panels", "get_panel_config", "report_panel_state"]}.items()
        for name in names}
    for name, model, module in (("get_panel_config", "PanelConfigOut", "panel_config_out"),
                                ("report_panel_state", "PanelStateOut", "panel_state_out")):
        returned = str(inspect.signature(api[name].sync).return_annotation)   # (Any: the 304's empty body)
        assert f"models.{module}.{model}" in returned, (name, returned)
        assert f"response_200 = {model}.from_dict(" in inspect.getsource(api[name]), name
    assert "if_none_match" in inspect.signature(api["get_panel_config"].sync).parameters
    client = generated.Client(base_url=server, raise_on_unexpected_status=True, timeout=httpx.Timeout(90.0))

    fab = api["register_fabric"].sync(client=client, body=m.FabricLayout(
        id="gen-agent", layout=m.FabricLayoutLayout.PLANES, hosts=8, ports_per_host=2, panel_prefix="gen-agent-"))
    assert isinstance(fab, m.FabricSummary), fab
    panels = api["list_panels"].sync(client=client, fabric_id="gen-agent")
    first = api["get_panel_config"].sync(panels[0].id, client=client)
    assert isinstance(first, m.PanelConfigOut) and isinstance(first.profile, m.PanelProfileOut)
    assert first.cross_connects == [] and isinstance(first.diff, m.PanelDiffOut)

    # the agent's long poll, parked on the version it holds until a plan changes the panel
    woke: dict = {}
    poll = threading.Thread(target=lambda: woke.update(r=api["get_panel_config"].sync_detailed(
        panels[0].id, client=client, if_none_match=f'"{first.version}"', wait=60.0)))
    poll.start()
    accepted = api["create_plan"].sync(client=client, body=m.PlanRequest.from_dict({
        "job_id": "gen-agent-j", "nodes": 8, "degree": 2, "alpha_us": 10, "bandwidth_gbps": 100,
        "fabric_id": "gen-agent", "workload": {"collective": "allreduce", "sizes_bytes": [1048576]}}))
    poll.join(HANG_S)
    assert not poll.is_alive()
    new = woke["r"].parsed
    assert woke["r"].status_code == 200 and isinstance(new, m.PanelConfigOut) and new.version > first.version
    assert woke["r"].headers["etag"] == f'"{new.version}"'
    assert new.cross_connects and all(isinstance(c, m.PanelCrossConnect) and c.plan_id == accepted.id
                                      for c in new.cross_connects)
    assert len(new.diff.add) == len(new.cross_connects) and new.planes.active == len(new.cross_connects)
    unchanged = api["get_panel_config"].sync_detailed(panels[0].id, client=client,
                                                      if_none_match=f'"{new.version}"')
    assert unchanged.status_code == 304 and unchanged.headers["etag"] == f'"{new.version}"'

    plan = _until(lambda: api["get_plan"].sync(accepted.id, client=client),
                  lambda p: p.status in (m.PlanOutStatus.DONE, m.PlanOutStatus.FAILED))
    assert plan.status == m.PlanOutStatus.DONE, plan.reason
    reports = []
    for panel in api["list_panels"].sync(client=client, fabric_id="gen-agent"):
        cfg = api["get_panel_config"].sync(panel.id, client=client)
        report = api["report_panel_state"].sync(panel.id, client=client, body=m.PanelStateIn(
            applied_version=cfg.version, status=m.PanelStateInStatus.APPLIED))
        assert isinstance(report, m.PanelStateOut) and report.applied_version == cfg.version
        assert report.status == m.PanelStateOutStatus.APPLIED and report.latest_version == cfg.version
        reports.append(report)
    assert [r.fabric_ready_plans for r in reports if r.fabric_ready_plans] == [[accepted.id]]
    assert api["get_plan"].sync(accepted.id, client=client).fabric["fabric_ready"] is True
