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
    assert fresh == json.dumps(json.loads(fresh), sort_keys=True, indent=2) + "\n"
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
