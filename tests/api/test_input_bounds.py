"""Issue 24 (problems 7, 9, 10): bodies are bounded before they are parsed, inputs are sized by what the worker
will check, in the request, and every schema maximum is the server's. Every test runs on SQLite and PostgreSQL
(the `client` fixture)."""
from __future__ import annotations

import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from services.api.guard import MAX_JSON_DEPTH, json_depth

from tests.conftest import MINIMAL, unique_job
from tests.helpers import committed_openapi
from tests.api.test_hardening import assert_shape

BODY_OPERATIONS = sorted((method.upper(), path.replace("{plan_id}", "p").replace("{panel_id}", "p"))
                         for path, ops in committed_openapi()["paths"].items() for method in ops
                         if method in ("post", "put", "patch"))


def _no_tracebacks(caplog):
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not logged, [(r.name, r.getMessage()[:200]) for r in logged]


# ----- problem 7: depth and NUL bombs ----------------------------------------------------------------------
def test_every_body_operation_is_listed():
    assert ("POST", "/v1/plans") in BODY_OPERATIONS and ("PUT", "/v1/panels/p/state") in BODY_OPERATIONS
    assert len(BODY_OPERATIONS) >= 5


@pytest.mark.parametrize("method,path", BODY_OPERATIONS)
def test_a_deep_body_is_422_naming_the_limit_with_no_traceback(client, caplog, method, path):
    """The issue's 2 KB body nested 990 deep (with a NUL in a string): 422 before any parser recurses."""
    caplog.set_level(logging.WARNING)
    bomb = '{"job_id":"\\u0000","x":' + "[" * 990 + "]" * 990 + "}"
    assert len(bomb) < 2100
    r = client.request(method, path, content=bomb.encode(), headers={"content-type": "application/json"})
    detail = assert_shape(r, 422)
    assert detail[0]["type"] == "too_deep" and str(MAX_JSON_DEPTH) in detail[0]["msg"], detail
    for shape in ("[" * 40 + "]" * 40, '{"a":' * 40 + "1" + "}" * 40, "[" * 100_000):    # unbalanced too
        r = client.request(method, path, content=shape.encode(), headers={"content-type": "application/json"})
        assert_shape(r, 422)
    _no_tracebacks(caplog)


def test_brackets_in_strings_do_not_count(client):
    job = "[" * 90 + '"' + "{" * 90                       # 180 brackets inside one string, an escaped quote
    r = client.post("/v1/plans", json={**MINIMAL, "job_id": job})
    assert r.status_code == 202, r.text


@pytest.mark.parametrize("text,depth", [(b"", 0), (b"1", 0), (b"[]", 1), (b'{"a": [[1], {"b": [2]}]}', 4),
                                         (b'["]]]", "[[[[", "\\\\", ["\\"["]]', 2), (b'"[[[["', 0),
                                         (b"[" * 5000, 5000), (b'["\\\\\\"[", [[]]]', 3)])
def test_json_depth(text, depth):
    assert json_depth(text) == depth


@given(value=st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                          lambda children: st.lists(children, max_size=3)
                          | st.dictionaries(st.text(max_size=5), children, max_size=3), max_leaves=60))
@hsettings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
def test_json_depth_is_the_parsers(value):
    def depth(v):
        if isinstance(v, list):
            return 1 + max(map(depth, v), default=0)
        if isinstance(v, dict):
            return 1 + max(map(depth, v.values()), default=0)
        return 0
    assert json_depth(json.dumps(value).encode()) == depth(value)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70)
                    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=4)
                    | st.dictionaries(st.sampled_from(["job_id", "nodes", "degree", "edges", "expr", "hosts", "panels",
                                                       "workload", "sizes_bytes", "links", "x", "\x00"])
                                      | st.text(max_size=4), children, max_size=5), max_leaves=40)


@pytest.mark.parametrize("method,path", BODY_OPERATIONS)
def test_adversarial_bodies_never_answer_5xx(client, caplog, method, path):
    """Arbitrary JSON (any nesting, NUL keys, huge integers, wrong types) on every body operation: 4xx or a
    success, never a 5xx or a logged traceback."""
    caplog.set_level(logging.WARNING)

    @hsettings(max_examples=25, deadline=None, derandomize=True, database=None,
               suppress_health_check=list(HealthCheck))
    @given(body=JSON, nest=st.integers(0, 60))
    def run(body, nest):
        text = "[" * nest + json.dumps(body) + "]" * nest
        r = client.request(method, path, content=text.encode(), headers={"content-type": "application/json"})
        assert r.status_code < 500, (method, path, text[:300], r.status_code, r.text[:300])
    run()
    _no_tracebacks(caplog)


# ----- problem 9 and 10: what the worker checks, checked in the request ---------------------------------------
def test_edge_lists_are_sized_per_node(client):
    r = client.post("/v1/topologies/evaluate", json={"nodes": 2, "edges": [[0, 0]] * 100 + [[0, 1], [1, 0]]})
    assert "self-loop" in assert_shape(r, 422, "edges.0")[0]["msg"]
    star = [[0, k] for k in range(1, 64)] + [[k, 0] for k in range(1, 64)]          # node 0: out- and in-degree 63
    detail = assert_shape(client.post("/v1/topologies/evaluate", json={"nodes": 64, "edges": star}), 422, "edges.62")
    assert "node 0 has more than 62 out-arcs" in detail[0]["msg"], detail
    # the expression form: sized by its largest per-node degree, not the average (2 nodes, 102 arcs: 51)
    loops = ", ".join(["0>0"] * 100)
    r = client.post("/v1/topologies/evaluate", json={"expr": f"edges(2, {loops}, 0>1, 1>0)"})
    assert "degree 101" in assert_shape(r, 422, "expr")[0]["msg"]


@pytest.mark.parametrize("edge,field", [({"tail": 0, "head": 1, "bandwidth_gbps": 1e-300}, "edges.0.bandwidth_gbps"),
                                        ({"tail": 0, "head": 1, "bandwidth_gbps": 0}, "edges.0.bandwidth_gbps"),
                                        ({"tail": 0, "head": 1, "alpha_us": 1e300}, "edges.0.alpha_us"),
                                        ({"tail": 0, "head": 1, "alpha_us": -1}, "edges.0.alpha_us"),
                                        ({"tail": 0, "head": 1024}, "edges.0.head"),
                                        ({"tail": True, "head": 1}, "edges.0.tail")])
def test_link_costs_are_physical(client, edge, field):
    assert_shape(client.post("/v1/topologies/evaluate", json={"nodes": 2, "edges": [edge, [1, 0]]}), 422, field)


@pytest.mark.parametrize("patch,field", [
    ({"workload": {"collective": "allreduce", "sizes_bytes": [True]}}, "workload.sizes_bytes.0"),
    ({"workload": {"collective": "allreduce", "sizes_bytes": [1024.0]}}, "workload.sizes_bytes.0"),
    ({"workload": {"collective": "allreduce", "sizes_bytes": [1024], "weights": [True]}}, "workload.weights.0"),
    ({"alpha_us": True}, "alpha_us"),
    ({"bandwidth_gbps": "100"}, "bandwidth_gbps"),
    ({"nodes": 16.0}, "nodes"),
    ({"bidirectional_only": 1}, "bidirectional_only"),
    ({"nodes": 4096}, "nodes"),                        # beyond what fits the default task limits (README)
])
def test_booleans_are_not_numbers(client, patch, field):
    assert_shape(client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job(), **patch}), 422, field)


@pytest.mark.parametrize("expr,position", [("ring(４)", 5), ("ring(1٠)", 6), ("torus(4,４)", 8), ("ring(4)\u3000", 7)])
def test_expressions_take_ascii_digits_only(client, expr, position):
    detail = assert_shape(client.post("/v1/topologies/evaluate", json={"expr": expr}), 422, "expr")
    assert f"at position {position}" in detail[0]["msg"], detail


def test_panels_are_within_their_device_profile(client):
    doc = {"id": "big", "panels": [{"id": "p", "kind": "patch_panel", "ports": 131072}],
           "hosts": [{"id": "h", "ports": [{"tx": {"panel": "p", "port": 0}, "rx": {"panel": "p", "port": 0}}]}]}
    detail = assert_shape(client.post("/v1/fabrics", json=doc), 422, "panels.0.ports")
    assert "1008" in detail[0]["msg"]
    doc["panels"][0]["profile"] = {"max_ports": 131072}                 # a device that large, described
    assert client.post("/v1/fabrics", json=doc).status_code == 201
    layout = {"id": "o", "layout": "planes", "hosts": 400, "ports_per_host": 2, "kind": "ocs"}
    assert "384" in assert_shape(client.post("/v1/fabrics", json=layout), 422, "hosts")[0]["msg"]
    assert client.post("/v1/fabrics", json={**layout, "profile": {"max_ports": 512}}).status_code == 201
    shared = {"id": "s", "layout": "shared", "hosts": 200, "ports_per_host": 4, "lookahead": True}
    assert_shape(client.post("/v1/fabrics", json=shared), 422, "hosts")     # 1600 ports on one panel


@pytest.mark.parametrize("path", ["/v1/plans", "/v1/fabrics"])
def test_options_lists_every_method(client, path):
    r = client.options(path)
    assert r.status_code == 204 and r.headers["allow"] == "GET, OPTIONS, POST", (r.status_code, r.headers)
    r = client.delete(path)
    assert r.status_code == 405 and r.headers["allow"] == "GET, OPTIONS, POST"
    r = client.options("/v1/plans/some-plan")
    assert r.status_code == 204 and r.headers["allow"] == "GET, OPTIONS"
    assert client.options("/v1/nowhere").status_code == 404


def test_schema_maxima_are_the_servers():
    from services.api.openapi_export import document
    from services.api.schemas import MAX_PLAN_NODES
    from services.compiler.api import PROFILES
    from services.jobs.requests.evaluation_request import EVALUATE_MAX_NODES
    from services.synthesis.bfb.lp import BFB_MAX_DEGREE

    doc = document()
    operation = doc["paths"]["/v1/plans/{plan_id}/schedules/{collective}"]["get"]
    params = {p["name"]: p for p in operation["parameters"]}
    most = max(p.max_channels for p in PROFILES.values())
    for name in ("instances", "channels"):
        schema = params[name]["schema"]
        assert next(x for x in schema.get("anyOf", [schema]) if "maximum" in x)["maximum"] == most
        for runtime, p in PROFILES.items():                 # and the description names every runtime's own
            assert f"{runtime} {p.max_channels}" in params[name]["description"]
    schemas = doc["components"]["schemas"]
    assert schemas["PlanRequest"]["properties"]["nodes"]["maximum"] == MAX_PLAN_NODES == 2048
    assert schemas["EvaluateRequest"]["properties"]["nodes"]["anyOf"][0]["maximum"] == EVALUATE_MAX_NODES
    assert str(BFB_MAX_DEGREE) in schemas["EvaluateRequest"]["properties"]["edges"]["description"]
