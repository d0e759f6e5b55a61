"""TypeScript types generated from the OpenAPI document by openapi-typescript in its default mode type-check a
small panel agent (tests/data/typescript/panel_agent.ts: the config long poll with If-None-Match, the state
report) and minimal request bodies (requests.ts: only the required fields) under `tsc --strict`.

node and npm come from the machine; openapi-typescript and typescript are installed into a temporary directory
for the session (never the repository). Skipped, saying why, when node or npm is missing or the npm registry
cannot be reached."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from services.api import openapi_export

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "tests" / "data" / "typescript"
PACKAGES = ["openapi-typescript@7.13.0", "typescript@5.9.3"]
TSC = ["--strict", "--noEmit", "--target", "es2022", "--module", "es2022", "--moduleResolution", "bundler",
       "--lib", "es2022,dom"]


@pytest.fixture(scope="module")
def toolchain(tmp_path_factory) -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the TypeScript client is not checked")
    tmp = tmp_path_factory.mktemp("ts")
    try:
        proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(tmp), *PACKAGES],
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.skip("npm install of openapi-typescript and typescript took over 300 s (registry unreachable?)")
    if proc.returncode != 0:
        pytest.skip(f"npm install of {' '.join(PACKAGES)} failed (registry unreachable?): {proc.stderr[-500:]}")
    return tmp


def test_typescript_types_check_the_panel_agent(toolchain, tmp_path):
    bin_ = toolchain / "node_modules" / ".bin"
    spec = tmp_path / "openapi.json"
    spec.write_text(openapi_export.render())
    gen = subprocess.run([str(bin_ / "openapi-typescript"), str(spec), "-o", str(tmp_path / "schema.d.ts")],
                         capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stdout[-2000:] + gen.stderr[-2000:]
    names = ["panel_agent.ts", "requests.ts"]
    for name in names:
        shutil.copy(SOURCES / name, tmp_path / name)
    tsc = subprocess.run([str(bin_ / "tsc"), *TSC, *names], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert tsc.returncode == 0, tsc.stdout[-4000:] + tsc.stderr[-2000:]
    # the contract is typed, not `unknown`: the generated config response has the fields the agent reads
    schema = (tmp_path / "schema.d.ts").read_text()
    assert "PanelConfigOut: {" in schema and "PanelStateOut: {" in schema
