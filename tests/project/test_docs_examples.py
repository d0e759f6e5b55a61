"""The documentation's runnable examples, run as written against a live server.

A fenced block opened with ```` ```sh runnable ```` holds shell commands, separated by blank or comment lines;
after a command, `# -> 202` gives the HTTP status of every `curl` it makes (one number: all of them; several:
each in turn; none given: every status must be below 400) and `# prints: TEXT` its whole output. A block
opened with ```` ```json expected ```` after a runnable block is what the last command of that block prints
(one JSON document, or one per line): every field it names must be present with that value, `"..."` standing
for any value or, inside a string, any text; a ```` ```text expected ```` block is its whole output, line by
line. Each documentation file's commands run in order in one bash session (shell variables and functions
carry over), in an empty directory; `scripts/dev cli` is this environment's `python -m services.cli`, and when
a command names `localhost:8000` the file runs against `fabricplan serve` on a free port with an empty data
directory. The commands wait on
the service themselves (long polls, bounded polling loops); nothing here measures time.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import HANG_S
from tests.served import ROOT, served, service_env

DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = "```sh runnable"
EXPECTED = "```json expected"
EXPECTED_TEXT = "```text expected"
HOST = "localhost:8000"
STATUS_MARK = "@@status "
# bounds for a hung server or command (tests/conftest.py HANG_S), not assertions on how long they take
START_TIMEOUT_S, RUN_TIMEOUT_S = HANG_S, 3 * HANG_S


@dataclass
class Command:
    where: str                           # file:line of its first line
    text: str
    statuses: list[int] | None = None    # from `# -> ...`
    prints: str | None = None            # from `# prints: ...`
    expected: list | None = None         # documents of a ```json expected block
    expected_text: str | None = None     # a ```text expected block


def _json_documents(text: str, where: str) -> list:
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise AssertionError(f"{where}: the expected block is not JSON: {exc}") from None


def parse(path: Path) -> list[Command]:
    """The runnable commands of one documentation file, in order, with what the file says they answer."""
    commands: list[Command] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opener = lines[i].strip()
        if opener not in (RUNNABLE, EXPECTED, EXPECTED_TEXT):
            i += 1
            continue
        start, i = i + 1, i + 1
        while lines[i].strip() != "```":
            i += 1
        body, i = lines[start:i], i + 1
        where = f"{path.name}:{start + 1}"
        if opener in (EXPECTED, EXPECTED_TEXT):
            assert commands, f"{where}: an expected block before any runnable command"
            last = commands[-1]
            assert last.expected is None and last.expected_text is None, f"{where}: a second expected block"
            if opener == EXPECTED:
                last.expected = _json_documents("\n".join(body), where)
            else:
                last.expected_text = "\n".join(line.rstrip() for line in body)
            continue
        current: list[str] = []
        first = 0
        for n, line in enumerate(body, start):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                if not current:
                    first = n + 1
                current.append(line)
                continue
            if current:
                commands.append(Command(f"{path.name}:{first}", "\n".join(current)))
                current = []
            if stripped.startswith("# -> "):
                assert commands and commands[-1].statuses is None, f"{path.name}:{n + 1}: a status for no command"
                commands[-1].statuses = [int(s) for s in stripped[5:].split()]
            elif stripped.startswith("# prints: "):
                assert commands and commands[-1].prints is None, f"{path.name}:{n + 1}: output for no command"
                commands[-1].prints = stripped[len("# prints: "):]
        if current:
            commands.append(Command(f"{path.name}:{first}", "\n".join(current)))
    return commands


def mismatch(expected, actual, at: str = "$") -> str | None:
    """Why `actual` is not what `expected` describes (None when it is)."""
    if expected == "...":
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{at}: expected an object, got {actual!r}"
        for key, value in expected.items():
            if key not in actual:
                return f"{at}: no field {key!r} (fields: {sorted(actual)})"
            if (why := mismatch(value, actual[key], f"{at}.{key}")) is not None:
                return why
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"{at}: expected {len(expected)} items, got {actual!r}"
        for n, (e, a) in enumerate(zip(expected, actual)):
            if (why := mismatch(e, a, f"{at}[{n}]")) is not None:
                return why
        return None
    if isinstance(expected, str) and "..." in expected and isinstance(actual, str):
        pattern = ".*".join(re.escape(part) for part in expected.split("..."))
        return None if re.fullmatch(pattern, actual, re.DOTALL) else f"{at}: {actual!r} is not {expected!r}"
    numbers = (int, float)
    if (isinstance(expected, numbers) and isinstance(actual, numbers)
            and not isinstance(expected, bool) and not isinstance(actual, bool)):
        return None if math.isclose(expected, actual, rel_tol=1e-9) else f"{at}: {actual!r}, not {expected!r}"
    return None if expected == actual and type(expected) is type(actual) else f"{at}: {actual!r}, not {expected!r}"


def script(commands: list[Command], base: str, out: Path) -> str:
    """One bash script running every command in turn, its output, `curl` statuses and exit status to files;
    it stops after the first command that fails."""
    lines = [f"curl() {{ command curl -w '%{{stderr}}{STATUS_MARK}%{{http_code}}\\n' \"$@\"; }}"]
    for n, c in enumerate(commands):
        text = c.text.replace(f"http://{HOST}", base).replace(HOST, base.removeprefix("http://"))
        text = text.replace("scripts/dev cli ", f"{sys.executable} -m services.cli ")
        lines += ["{", text, f"}} > {out}/{n}.out 2> {out}/{n}.err", f"echo $? > {out}/{n}.rc",
                  f'[ "$(cat {out}/{n}.rc)" = 0 ] || exit 0']
    return "\n".join(lines) + "\n"


def check(c: Command, out: str, err: str, rc: int, base: str) -> None:
    statuses = [int(line[len(STATUS_MARK):]) for line in err.splitlines() if line.startswith(STATUS_MARK)]
    stderr = "\n".join(line for line in err.splitlines() if not line.startswith(STATUS_MARK))
    context = f"{c.where}: {c.text}\n--- output:\n{out[-3000:]}\n--- stderr:\n{stderr[-2000:]}"
    assert rc == 0, f"exit status {rc}\n{context}"
    if c.statuses is None:
        assert all(s < 400 for s in statuses), f"HTTP statuses {statuses}\n{context}"
    elif len(c.statuses) == 1:
        assert statuses and set(statuses) == set(c.statuses), f"HTTP statuses {statuses}, not {c.statuses}\n{context}"
    else:
        assert statuses == c.statuses, f"HTTP statuses {statuses}, not {c.statuses}\n{context}"
    if c.prints is not None:
        assert out.strip() == c.prints, f"printed {out.strip()!r}, not {c.prints!r}\n{context}"
    if c.expected_text is not None:
        printed = "\n".join(line.rstrip() for line in out.strip("\n").splitlines())
        assert printed == c.expected_text, f"printed\n{printed}\nnot\n{c.expected_text}\n{context}"
    if c.expected is not None:
        expected = json.loads(json.dumps(c.expected).replace(f"http://{HOST}", base))
        actual = _json_documents(out, c.where)
        why = mismatch(expected, actual)
        assert why is None, f"{why}\n{context}"


def test_parse_reads_statuses_output_and_expected_json(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("text\n```sh runnable\nA=1\n# -> 202 200\nfor i in 1; do\n  echo $A\ndone\n"
                   "# prints: 1\n```\n```json expected\n{\"a\": \"...\", \"b\": [1, 2.5]}\n```\n```sh\nnot run\n```\n")
    a, b = parse(doc)
    assert (a.text, a.statuses, a.prints, a.expected) == ("A=1", [202, 200], None, None)
    assert (b.text, b.prints, b.where) == ("for i in 1; do\n  echo $A\ndone", "1", "doc.md:5")
    assert b.expected == [{"a": "...", "b": [1, 2.5]}]
    doc.write_text("```sh runnable\nscripts/dev cli frontier 8 2\n```\n```text expected\nline one  \n  two\n```\n")
    (c,) = parse(doc)
    assert (c.expected_text, c.expected) == ("line one\n  two", None)
    assert f"{sys.executable} -m services.cli frontier 8 2" in script([c], "http://127.0.0.1:1", tmp_path)


def test_mismatch_names_the_difference():
    actual = {"id": "x", "url": "http://h/v1/plans/x", "z": 1}
    assert mismatch({"id": "...", "url": "http://h/v1/plans/..."}, actual) is None
    assert mismatch({"id": "..."}, {"ids": 1}) == "$: no field 'id' (fields: ['ids'])"
    assert mismatch({"a": {"b": 3}}, {"a": {"b": 4}}) == "$.a.b: 4, not 3"
    assert mismatch({"t": 0.9375}, {"t": 15 / 16}) is None
    assert mismatch([1, 2], [1]) is not None
    assert mismatch({"ok": True}, {"ok": 1}) is not None
    assert mismatch("http://h/v1/plans/...", "http://h/v1/fabrics/x") is not None


def test_readme_tutorial_blocks_are_all_runnable():
    """Every fenced block of the README's tutorial is run or compared: none is only shown."""
    text = (ROOT / "README.md").read_text()
    tutorial = text.split("\n## Tutorial", 1)[1].split("\n## ", 1)[0]
    openers = [line.strip() for line in tutorial.splitlines() if line.startswith("```") and line.strip() != "```"]
    assert openers and set(openers) <= {RUNNABLE, EXPECTED}, openers
    assert len(parse(ROOT / "README.md")) >= 15


@pytest.mark.parametrize("doc", [p for p in DOC_FILES if RUNNABLE in p.read_text()], ids=lambda p: p.name)
def test_runnable_examples(doc: Path, tmp_path):
    for tool in ("bash", "curl", "jq"):
        if shutil.which(tool) is None:
            pytest.skip(f"the documented examples need {tool}, which is not installed")
    commands = parse(doc)
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    needs_server = any(HOST in c.text for c in commands)
    server = served(service_env(tmp_path / "data"), timeout_s=START_TIMEOUT_S) if needs_server else nullcontext(
        (f"http://{HOST}", None))
    with server as (base, _proc):
        (tmp_path / "run.sh").write_text(script(commands, base, out))
        subprocess.run(["bash", str(tmp_path / "run.sh")], cwd=work, timeout=RUN_TIMEOUT_S, check=True)
    for n, c in enumerate(commands):
        assert (out / f"{n}.rc").exists(), f"{c.where}: not run (an earlier command failed?)"
        check(c, (out / f"{n}.out").read_text(), (out / f"{n}.err").read_text(),
              int((out / f"{n}.rc").read_text()), base)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_documentation_files_resolve():
    """Every relative link of the README and docs/*.md names a file that exists and, with #anchor, a heading
    of that file."""
    broken = []
    for doc in DOC_FILES:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md":
                headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$", file.read_text(), flags=re.MULTILINE)}
                if anchor not in headings:
                    broken.append(f"{doc.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_source_paths_named_in_the_documentation_exist():
    """Every `services/...`, `tests/...` (and other top-level folder) path the documentation names in backticks
    exists, so a moved or renamed module shows here (a `*` is a glob that must match something)."""
    missing = []
    for doc in DOC_FILES:
        for path in re.findall(r"`((?:services|workers|tests|bench|scripts|migrations|openapi|docs)/[\w./*-]*)",
                               doc.read_text()):
            path = path.rstrip(".")
            found = any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
            if not found:
                missing.append(f"{doc.name}: {path}")
    assert not missing, "\n".join(missing)


def test_operations_documents_every_setting_with_its_default():
    """docs/operations.md's settings table has one row per field of services.config.Settings, with its default,
    and every FABRICPLAN_ variable the documentation names is a setting or one read from the environment."""
    from services.config import Settings

    text = (ROOT / "docs" / "operations.md").read_text()
    rows = dict(re.findall(r"^\| `FABRICPLAN_([A-Z_]+)` \| ([^|]*) \|", text, flags=re.MULTILINE))
    for name, field in Settings.model_fields.items():
        assert name.upper() in rows, f"FABRICPLAN_{name.upper()} is not in docs/operations.md's settings table"
        default = "(none)" if field.default is None else '""' if field.default == "" else str(field.default).lower()
        assert rows[name.upper()].strip().lower() == default, (name, rows[name.upper()], default)
    named = set()
    for doc in DOC_FILES:
        named |= set(re.findall(r"FABRICPLAN_([A-Z_]+[A-Z])", doc.read_text()))
    env_only = {"COMPILE_THREADS", "CACHE_DIR", "VENV", "CHROMIUM", "TEST_DATABASE_URL", "TEST_REDIS_URL",
                "TEST_HANG_S", "NPM_LINT_DIR"}
    unknown = named - {n.upper() for n in Settings.model_fields} - env_only
    assert not unknown, f"the documentation names settings the code does not have: {sorted(unknown)}"


def test_python_names_in_the_documentation_exist():
    """Every dotted `services.<package>...` name the documentation gives is a module, or a module and the
    attribute path under it."""
    import importlib
    import importlib.util

    missing = []
    for doc in DOC_FILES:
        for name in sorted(set(re.findall(r"\bservices(?:\.[A-Za-z_]\w*)+", doc.read_text()))):
            parts = name.split(".")
            for cut in range(len(parts), 0, -1):
                module = ".".join(parts[:cut])
                try:
                    found = importlib.util.find_spec(module) is not None
                except ModuleNotFoundError:
                    found = False
                if found:
                    obj = importlib.import_module(module)
                    for attr in parts[cut:]:
                        obj = getattr(obj, attr, None)
                    if obj is None:
                        missing.append(f"{doc.name}: {name}")
                    break
            else:
                missing.append(f"{doc.name}: {name}")
    assert not missing, "\n".join(missing)
