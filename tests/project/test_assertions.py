"""No test passes without checking something: every test function of the suite (read with `ast`) reaches a
check on every path through its `if`s: an `assert`, `pytest.raises` / `warns` / `fail`, or a call of a helper
that checks (a function of the suite holding one of these, or a checker named so: assert_*, check*, verify*,
validate*, expect*, hypothesis' run_state_machine_as_test). A test whose only asserts sit under an `if` (it
passes, checking nothing, when the condition is false) is named here."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PYTEST_CHECKS = {"raises", "warns", "fail", "skip", "xfail", "importorskip", "deprecated_call"}
CHECKER_WORDS = ("assert", "check", "verify", "validate", "expect")


def _name(call: ast.Call) -> tuple[str, str]:
    f = call.func
    if isinstance(f, ast.Attribute):
        return (f.value.id if isinstance(f.value, ast.Name) else ""), f.attr
    return "", f.id if isinstance(f, ast.Name) else ""


def _is_check(node: ast.AST, helpers: set[str]) -> bool:
    """`node` (an expression or a simple statement) checks something."""
    for n in ast.walk(node):
        if isinstance(n, (ast.Assert, ast.Raise)):
            return True
        if isinstance(n, ast.Call):
            base, name = _name(n)
            if base == "pytest" and name in PYTEST_CHECKS or name in helpers or name == "run_state_machine_as_test" \
                    or any(w in name.lower() for w in CHECKER_WORDS):
                return True
    return False


def _checks(body: list[ast.stmt], helpers: set[str]) -> bool:
    """Every way through `body` reaches a check (a loop's body counts; an `if` needs a check on both sides)."""
    local = set(helpers)
    for s in body:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _checks(s.body, local) or any(_is_check(d, local) for d in s.decorator_list):
                local.add(s.name)                                 # a nested check, counted where it is called
            continue
        if isinstance(s, ast.If):
            if _is_check(s.test, local) or _checks(s.body, local) and _checks(s.orelse, local):
                return True
            continue
        if isinstance(s, ast.Try):
            if _checks(s.body, local) or _checks(s.finalbody, local):
                return True
            continue
        if isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
            if _is_check(s.iter if not isinstance(s, ast.While) else s.test, local) or _checks(s.body, local):
                return True
            continue
        if isinstance(s, (ast.With, ast.AsyncWith)):
            if any(_is_check(i.context_expr, local) for i in s.items) or _checks(s.body, local):
                return True
            continue
        if _is_check(s, local):
            return True
    return False


def _functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield None, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield node, item


def unchecked_tests(root: Path = TESTS) -> list[str]:
    trees = {p: ast.parse(p.read_text(), str(p)) for p in sorted(root.rglob("*.py"))}
    helpers: set[str] = set()
    while True:                                                   # helpers calling helpers, to a fixed point
        found = {f.name for t in trees.values() for _, f in _functions(t)
                 if not f.name.startswith("test") and _checks(f.body, helpers)}
        if found <= helpers:
            break
        helpers |= found
    return [f"{p.relative_to(root.parent)}:{f.lineno} {f.name}" for p, t in trees.items() if p.name.startswith("test_")
            for cls, f in _functions(t) if f.name.startswith("test") and not _checks(f.body, helpers)]


def test_the_scan_finds_a_check_under_an_if_only(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "def _helper(x):\n    assert x\n\n"
        "def test_conditional(t):\n    if t:\n        assert t > 1\n\n"
        "def test_both_sides(t):\n    if t:\n        assert t\n    else:\n        _helper(t)\n\n"
        "def test_loop(ts):\n    for t in ts:\n        assert t\n\n"
        "def test_nothing(t):\n    t.run()\n\n"
        "def test_nested(t):\n    def run(x):\n        assert x\n    run(t)\n")
    assert unchecked_tests(tmp_path / "tests") == ["tests/test_x.py:4 test_conditional",
                                                  "tests/test_x.py:18 test_nothing"]


def test_every_test_checks_something():
    assert unchecked_tests() == []
