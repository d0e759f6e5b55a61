"""openapi/openapi.json is generated from the app (services.api.openapi_export) and must not go stale."""
from __future__ import annotations

import difflib
import json

import pytest

from services.api import openapi_export

REGENERATE = f"regenerate it with `{openapi_export.REGENERATE}` and commit openapi/openapi.json"
REQUIRED_PATHS = {
    "/v1/plans": {"post", "get"},
    "/v1/plans/{plan_id}": {"get"},
    "/v1/frontiers": {"get"},
    "/v1/topologies/evaluate": {"post"},
    "/healthz": {"get"},
    "/readyz": {"get"},
    "/metrics": {"get"},
}


@pytest.fixture(scope="module")
def fresh() -> str:
    return openapi_export.render()


def test_committed_document_is_current(fresh):
    path = openapi_export.OUTPUT
    assert path.exists(), f"{path} is missing; {REGENERATE}"
    committed = path.read_text()
    if committed != fresh:
        diff = list(difflib.unified_diff(committed.splitlines(), fresh.splitlines(), "committed", "generated",
                                         lineterm="", n=1))
        shown = "\n".join(diff[:60]) + ("\n..." if len(diff) > 60 else "")
        pytest.fail(f"openapi/openapi.json is stale; {REGENERATE}\n{shown}")


def test_rendering_is_deterministic_and_canonical(fresh):
    assert fresh.endswith("}\n")
    assert fresh == json.dumps(openapi_export.canonical(json.loads(fresh)), indent=2) + "\n"
    assert openapi_export.render() == fresh


@pytest.mark.parametrize("source", ["committed", "generated"])
def test_required_paths(fresh, source):
    doc = json.loads(openapi_export.OUTPUT.read_text() if source == "committed" else fresh)
    assert doc["openapi"].startswith("3.")
    for path, methods in REQUIRED_PATHS.items():
        assert path in doc["paths"], f"{source} document lacks {path}"
        assert methods <= doc["paths"][path].keys(), f"{source} document: {path} lacks {methods}"


def test_check_flags_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    assert openapi_export.main(["--check", "--output", str(stale)]) == 1
    assert openapi_export.REGENERATE in capsys.readouterr().err
    assert openapi_export.main(["--output", str(stale)]) == 0
    assert openapi_export.main(["--check", "--output", str(stale)]) == 0
    assert stale.read_text() == openapi_export.render()


def test_check_flags_a_missing_file(tmp_path, capsys):
    assert openapi_export.main(["--check", "--output", str(tmp_path / "nope.json")]) == 1
    assert "missing" in capsys.readouterr().err


def test_operations_are_named_typed_and_document_their_errors(fresh):
    """What generated clients need: named operation ids, optional auth, binary downloads first, enums, typed
    bodies, and every error status in the API's error model."""
    doc = json.loads(fresh)
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    assert not [i for i in ids if "_v1_" in i or i.endswith(("_get", "_post", "_put", "_delete"))], ids
    assert {"create_plan", "get_plan", "get_plan_schedule", "get_plan_topology", "register_fabric", "list_panels",
            "report_panel_state"} <= set(ids)
    assert doc["security"][0] == {} and all("security" not in op for ops in doc["paths"].values()
                                             for op in ops.values())
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status, response in op["responses"].items():
                if int(status) >= 400 and path not in ("/readyz",):         # RFC 9457 problems only
                    assert list(response.get("content", {})) == ["application/problem+json"], (method, path, status)
                    ref = response["content"]["application/problem+json"]["schema"]["$ref"]
                    assert ref == "#/components/schemas/Problem", (method, path, status, response)
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    for path in ("/v1/plans/{plan_id}/schedules/{collective}", "/v1/plans/{plan_id}/topology",
                 "/v1/plans/{plan_id}/revisions/{number}/schedules/{collective}",
                 "/v1/plans/{plan_id}/revisions/{number}/topology", "/v1/artifacts/{digest}"):
        op = doc["paths"][path]["get"]
        assert next(iter(op["responses"]["200"]["content"])) == "application/octet-stream", path
        params = {p["name"]: p["schema"] for p in op["parameters"]}
        for name in ("format", "collective"):
            if name in params:
                assert params[name]["enum"], (path, name)
    runtime = {p["name"]: p["schema"] for p in doc["paths"]["/v1/plans/{plan_id}/schedules/{collective}"]["get"]
               ["parameters"]}["runtime"]
    assert {"executor", "rccl", "legacy"} <= set(runtime["anyOf"][0]["enum"])
    body = doc["paths"]["/v1/fabrics"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {r["$ref"].rsplit("/", 1)[1] for r in body["oneOf"]} == {"FabricLayout", "FabricDocument"}
