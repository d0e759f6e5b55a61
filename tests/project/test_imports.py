"""Every project import resolves, the ones inside functions too (bench scripts import lazily, so a moved name
shows up only when someone runs the bench by hand: `bench/training.py` once imported CACHE from the wrong
module)."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("services", "workers", "bench")
PROJECT_IMPORT = re.compile(rf"^\s*(?:from|import) (?:{'|'.join(PACKAGES)})\b", re.MULTILINE)
FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if PROJECT_IMPORT.search(p.read_text()))


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
    imports = list(_project_imports(path))
    assert imports
    for line, module, names in imports:
        m = importlib.import_module(module)                       # raises when the module is gone
        for name in names:
            # a name the module defines, or a submodule (import_module raises when it is neither)
            assert hasattr(m, name) or importlib.import_module(f"{module}.{name}"), (line, module, name)
