"""openapi/openapi.json passes redocly's recommended rules and spectral's OpenAPI ruleset with no error and no
warning (openapi/redocly.yaml, openapi/spectral.yaml: spectral's `info-contact` is off, for the reason written
there). The document linted is the app's current one (services.api.openapi_export.render), which
tests/project checks the committed file equals.

node and npm come from the machine; @redocly/cli and @stoplight/spectral-cli, at pinned versions, are installed
with npm into a cache directory outside the repository (FABRICPLAN_NPM_LINT_DIR, by default
~/.cache/fabricplan/npm-lint), once: later runs find them there. Skipped, saying why, when node or npm is missing
or the npm registry cannot be reached."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from services.api import openapi_export

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"@redocly/cli": "2.77.0", "@stoplight/spectral-cli": "6.16.3"}
CACHE = Path(os.environ.get("FABRICPLAN_NPM_LINT_DIR") or Path.home() / ".cache" / "fabricplan" / "npm-lint")


def _installed(prefix: Path) -> bool:
    for name, version in PACKAGES.items():
        manifest = prefix / "node_modules" / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text()).get("version") != version:
            return False
    return True


@pytest.fixture(scope="module")
def linters() -> Path:
    """The directory of the linters' executables (node_modules/.bin under the cache directory)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the OpenAPI document is not linted")
    if not _installed(CACHE):
        CACHE.mkdir(parents=True, exist_ok=True)
        pinned = [f"{name}@{version}" for name, version in PACKAGES.items()]
        try:
            proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), *pinned],
                                  capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm install of {' '.join(pinned)} took over 600 s (registry unreachable?)")
        if proc.returncode != 0 or not _installed(CACHE):
            pytest.skip(f"npm install of {' '.join(pinned)} failed (registry unreachable?): {proc.stderr[-500:]}")
    return CACHE / "node_modules" / ".bin"


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("openapi") / "openapi.json"
    path.write_text(openapi_export.render())
    return path


def test_redocly_recommended_rules_pass(linters, spec):
    proc = subprocess.run([str(linters / "redocly"), "lint", "--config", str(ROOT / "openapi" / "redocly.yaml"),
                           "--format=json", str(spec)], capture_output=True, text=True, timeout=300, cwd=spec.parent)
    report = json.loads(proc.stdout)
    problems = [f"{p['severity']} {p['ruleId']}: {p['message']} at {p['location'][0]['pointer']}"
                for p in report["problems"]]
    assert report["totals"]["errors"] == report["totals"]["warnings"] == 0, "\n".join(problems)
    assert report["totals"]["ignored"] == 0 and proc.returncode == 0


def test_spectral_oas_rules_pass(linters, spec):
    proc = subprocess.run([str(linters / "spectral"), "lint", "-r", str(ROOT / "openapi" / "spectral.yaml"),
                           "--fail-severity=hint", "-f", "json", str(spec)],
                          capture_output=True, text=True, timeout=300, cwd=spec.parent)
    start = proc.stdout.find("[")
    results = json.loads(proc.stdout[start:proc.stdout.rindex("]") + 1]) if start >= 0 else None
    assert results is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert results == [], "\n".join(f"{r['code']}: {r['message']} at {'.'.join(map(str, r['path']))}"
                                     for r in results)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_document_declares_servers_license_and_every_tag(spec):
    doc = json.loads(spec.read_text())
    assert doc["servers"] and doc["info"]["license"]["identifier"].startswith("LicenseRef-")
    declared = {t["name"]: t.get("description") for t in doc["tags"]}
    used = {t for ops in doc["paths"].values() for op in ops.values() for t in op.get("tags", [])}
    assert used <= set(declared) and all(declared.values())
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op.get("operationId") and op.get("summary") and op.get("description"), (method, path)
            assert "422" in op["responses"], (method, path)           # an unknown query parameter
