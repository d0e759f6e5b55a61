"""What the CLI says when an input is wrong or a file is of the other format: the message names the actual
problem (exit 2), and a report prints only the fields that apply to the file's format."""
import json

from services.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_check_of_a_missing_file_says_so(capsys, tmp_path):
    missing = tmp_path / "no" / "such.xml"
    code, _, err = run(capsys, "compile", str(missing), "--check")
    assert code == 2 and "no such file" in err and str(missing) in err
    assert "topology expression" not in err.replace("or a topology expression", "")


def test_keys_revoke_without_id_names_the_option(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICPLAN_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("FABRICPLAN_DATABASE_URL", f"sqlite:///{tmp_path / 'k.db'}")
    from services.config import get_settings

    get_settings.cache_clear()
    try:
        code, _, err = run(capsys, "keys", "revoke")
    finally:
        get_settings.cache_clear()
    assert code == 2 and "--id" in err and "None" not in err


def test_oneccl_check_reports_the_runtime_and_its_counts(capsys, tmp_path):
    out = tmp_path / "ar.oneccl.xml"
    code, _, _ = run(capsys, "compile", "ring(4)", "--collective", "allreduce", "--runtime", "oneccl", "-o", str(out))
    assert code == 0
    code, stdout, _ = run(capsys, "compile", str(out), "--check", "--runtime", "oneccl", "--json")
    data = json.loads(stdout)
    assert code == 0 and data["ok"] and data["runtime"] == "oneccl" and data["format"] == "oneccl"
    assert None not in data.values(), data
    assert data["instructions"] >= data["max_rank_instructions"] > 0 and data["messages"] > 0
    code, stdout, _ = run(capsys, "compile", str(out), "--check")        # text output: no "None" anywhere
    assert code == 0 and "None" not in stdout and "oneccl" in stdout
