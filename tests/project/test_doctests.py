"""Every docstring example of the library runs: each module under services/ whose docstrings hold an example
(`>>> `) is found here by reading the files, so a new module's examples run without being listed anywhere.
The examples of functools.cached_property docstrings run too (doctest's finder skips them)."""
from __future__ import annotations

import doctest
import functools
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(_module_name(p) for p in (ROOT / "services").rglob("*.py") if ">>> " in p.read_text())


def examples(module) -> list[doctest.DocTest]:
    """The module's doctests as doctest finds them, and those of its classes' cached properties."""
    finder = doctest.DocTestFinder()
    tests = finder.find(module)
    for cls in vars(module).values():
        if not inspect.isclass(cls) or cls.__module__ != module.__name__:
            continue
        for name, attr in vars(cls).items():
            if isinstance(attr, functools.cached_property):
                tests += finder.find(attr.func, f"{module.__name__}.{cls.__name__}.{name}", module=module,
                                     globs=vars(module))
    return [t for t in tests if t.examples]


def test_the_examples_are_found():
    assert len(MODULES) >= 30 and "services.synthesis.topology.graph" in MODULES, MODULES
    from services.synthesis.topology import graph

    assert "services.synthesis.topology.graph.Topology.distance_counts" in {t.name for t in examples(graph)}


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module):
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    tests = examples(importlib.import_module(module))
    for test in tests:
        runner.run(test)                # a failing example is printed (captured, shown with the failure)
    result = runner.summarize(verbose=False)
    assert tests and result.failed == 0, f"{module}: {result.failed} of {result.attempted} examples failed"
