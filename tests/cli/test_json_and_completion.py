"""`--json` on keys, migrate and frontier (frontier: an object with its bounds), and the bash completion script
generated from the parser."""
import json
import shutil
import subprocess

import pytest

from services.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def database(tmp_path, monkeypatch):
    from services.config import get_settings

    monkeypatch.setenv("FABRICPLAN_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("FABRICPLAN_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_frontier_json_is_an_object_with_its_bounds(capsys):
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.finder import bounds

    code, out, _ = run(capsys, "frontier", "12", "2", "--json")
    data = json.loads(out)
    assert code == 0 and (data["nodes"], data["degree"], data["collective"]) == (12, 2, "allgather")
    b = bounds(12, 2, Collective.ALLGATHER)
    assert data["bounds"] == {"steps": b["steps"], "tau": float(b["tau"]), "tau_exact": str(b["tau"])}
    assert data["entries"] and all(e["steps"] >= b["steps"] and e["tau"] >= float(b["tau"]) - 1e-12
                                   for e in data["entries"])


def test_keys_and_migrate_json(capsys, database):
    target = database / "bootstrap.key"
    code, out, _ = run(capsys, "migrate", "--bootstrap-key", str(target), "--json")
    first = json.loads(out)
    secret = target.read_text().strip()
    assert code == 0 and first["revision"] == "head" and first["bootstrap_key"]["created"] is True
    assert secret not in out
    code, out, _ = run(capsys, "migrate", "--bootstrap-key", str(target), "--json")
    assert json.loads(out)["bootstrap_key"] == {"file": str(target), "created": False, "id": None}
    code, out, _ = run(capsys, "keys", "create", "--name", "ops", "--role", "viewer")
    made = json.loads(out)
    code, out, _ = run(capsys, "keys", "list", "--json")
    listed = json.loads(out)
    assert code == 0 and [k["id"] for k in listed] == [first["bootstrap_key"]["id"], made["id"]]
    assert listed[1] == {"id": made["id"], "name": "ops", "role": "viewer", "panel_id": None, "revoked": False}
    code, out, _ = run(capsys, "keys", "revoke", "--id", made["id"], "--json")
    assert code == 0 and json.loads(out) == {"id": made["id"], "revoked": True}
    code, out, _ = run(capsys, "keys", "list", "--json")
    assert [k["revoked"] for k in json.loads(out)] == [False, True]


def _complete(script: str, *words: str) -> list[str]:
    """What bash offers after `words` (the last one being completed) with the script loaded."""
    line = " ".join(["fabricplan", *words])
    cmd = (f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in ['fabricplan', *words])}); "
           f"COMP_CWORD={len(words)}; COMP_LINE={line!r}; _fabricplan; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion(capsys):
    code, script, _ = run(capsys, "completion", "bash")
    assert code == 0 and "complete -o filenames -F _fabricplan fabricplan" in script
    assert {"compile", "completion"} <= set(_complete(script, "comp"))
    assert set(_complete(script, "compile", "--runtime", "")) == {"executor", "rccl", "legacy", "oneccl"}
    assert set(_complete(script, "keys", "")) >= {"create", "list", "revoke"}
    assert "--json" in _complete(script, "keys", "--j")
    assert "--bootstrap-key" in _complete(script, "migrate", "--boot")
