"""Every project import resolves, the ones inside functions too (bench scripts import lazily, so a moved name
shows up only when someone runs the bench by hand: `bench/training.py` once imported CACHE from the wrong
module)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("services", "workers", "bench")
FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _project_imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in PACKAGES:
            yield node.lineno, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    yield node.lineno, a.name, []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_project_import_resolves(path):
    for line, module, names in _project_imports(path):
        m = importlib.import_module(module)
        for name in names:
            if not hasattr(m, name):
                importlib.import_module(f"{module}.{name}")      # a submodule; raises when it is neither
