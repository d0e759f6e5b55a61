"""The lock files (requirements.lock, requirements-dev.lock; scripts/lock) agree with pyproject.toml: every
pinned direct dependency appears at the same version, every locked package has hashes, and the runtime lock
carries no dev-only package."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = "regenerate the lock files with `scripts/dev lock` (uv pip compile, see scripts/lock) and commit them"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.split("[")[0].strip().lower())


def pins(requirements: list[str]) -> dict[str, str]:
    out = {}
    for req in requirements:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+(?:\[[^\]]*\])?)\s*==\s*([^\s;]+)\s*", req)
        assert m, f"pyproject.toml: {req!r} is not pinned with == (every direct dependency is)"
        out[norm(m.group(1))] = m.group(2)
    return out


def locked(path: Path) -> dict[str, str]:
    text = path.read_text()
    entries = re.findall(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})*)", text, re.M)
    for name, _, hashes in entries:
        assert "--hash=sha256:" in hashes, f"{path.name}: {name} has no hash; {FIX}"
    return {norm(n): v for n, v, _ in entries}


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.mark.parametrize("lock,extras", [("requirements.lock", ()), ("requirements-dev.lock", ("dev",))])
def test_lock_agrees_with_pyproject(project, lock, extras):
    path = ROOT / lock
    assert path.exists(), f"{lock} is missing; {FIX}"
    want = pins(project["dependencies"])
    for extra in extras:
        want.update(pins(project["optional-dependencies"][extra]))
    have = locked(path)
    wrong = {n: (v, have.get(n)) for n, v in want.items() if have.get(n) != v}
    assert not wrong, f"{lock} disagrees with pyproject.toml (name: (pyproject, lock)): {wrong}; {FIX}"


def test_runtime_lock_has_no_dev_only_packages(project):
    runtime, dev = locked(ROOT / "requirements.lock"), locked(ROOT / "requirements-dev.lock")
    dev_only = set(pins(project["optional-dependencies"]["dev"])) - set(pins(project["dependencies"]))
    assert not dev_only & set(runtime), f"dev packages in requirements.lock: {dev_only & set(runtime)}; {FIX}"
    assert all(dev.get(n) == v for n, v in runtime.items()), f"the two locks resolve differently; {FIX}"


def test_the_image_and_scripts_dev_install_from_the_locks():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"--require-hashes -r \S*requirements\.lock", dockerfile) and "--no-deps" in dockerfile
    dev = (ROOT / "scripts" / "dev").read_text()
    assert "--require-hashes -r requirements-dev.lock" in dev and "--no-deps -e ." in dev and "lock)" in dev
