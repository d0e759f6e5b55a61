"""`fabricplan bfb` (DESIGN section 5)."""
import json
import subprocess
import sys

import pytest

from services.cli import main
from services.synthesis.schedule.ir import Schedule

REQUIRED = {"expr", "nodes", "degree", "diameter", "steps", "tau", "bw_optimal", "verified", "seconds"}


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bfb_json_has_the_contract_fields(capsys):
    code, out, _ = run(capsys, "bfb", "genkautz(4, 64)", "--json")
    assert code == 0
    data = json.loads(out)
    assert REQUIRED <= data.keys()
    assert data["expr"] == "genkautz(4, 64)" and data["nodes"] == 64 and data["degree"] == 4
    assert data["diameter"] == 3 and data["steps"] == 3
    assert data["tau"] == pytest.approx(1.3125) and data["tau_exact"] == "21/16"
    assert data["verified"] is True and data["bw_optimal"] is False and data["moore_optimal"] is True
    assert data["prediction_matches"] is True


def test_bfb_canonicalises_and_reports_bw_optimality(capsys):
    code, out, _ = run(capsys, "bfb", "circulant( 16 )", "--json")
    data = json.loads(out)
    assert code == 0 and data["expr"] == "circulant(16, 3, 4)" and data["bw_optimal"] is True


@pytest.mark.parametrize("collective,steps,tau", [("reducescatter", 5, "23/24"), ("allreduce", 10, "23/12")])
def test_bfb_other_collectives(capsys, collective, steps, tau):
    code, out, _ = run(capsys, "bfb", "torus(4, 6)", "--collective", collective, "--json")
    data = json.loads(out)
    assert code == 0 and data["steps"] == steps and data["tau_exact"] == tau and data["bw_optimal"]


def test_bfb_writes_the_schedule_blob(capsys, tmp_path):
    path = tmp_path / "s.npz"
    code, out, _ = run(capsys, "bfb", "hypercube(4)", "-o", str(path), "--json")
    assert code == 0 and json.loads(out)["output"] == str(path)
    s = Schedule.from_bytes(path.read_bytes())
    assert s.nodes == 16 and s.steps == 4


def test_bfb_chunks(capsys):
    code, out, _ = run(capsys, "bfb", "genkautz(4, 64)", "--chunks", "4", "--json")
    assert code == 0 and json.loads(out)["verified"]


def test_plain_output(capsys):
    code, out, _ = run(capsys, "bfb", "complete(5)")
    assert code == 0 and "tau_exact" in out and "4/5" in out


@pytest.mark.parametrize("argv,needle", [
    (["bfb", "torus(4,"], "position 8"),
    (["bfb", "nosuch(3)"], "unknown topology 'nosuch'"),
    (["bfb", "circulant(8, 2)"], "disconnected"),
    (["bfb", "hypercube(13)"], "at most 4096 nodes"),
    (["bfb", "complete(70)"], "degree at most 62"),
    (["schedule", "line(complete(64))"], "degree at most 62"),
    (["bfb", "torus(4, 4)", "--collective", "gather"], "unknown collective"),
    (["bfb", "torus(4, 4)", "--chunks", "0"], "chunks must be a positive integer"),
])
def test_bad_input_exits_2_with_a_message(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and needle in err and err.startswith("fabricplan: error:") and out == ""


def test_installed_entry_point():
    proc = subprocess.run([sys.executable, "-m", "services.cli", "bfb", "ring(4)", "--json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout)["tau_exact"] == "3/4"
    bad = subprocess.run([sys.executable, "-m", "services.cli", "bfb", "ring("], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_compile_msccl_with_check(capsys, tmp_path):
    out = tmp_path / "ar.xml"
    code, stdout, _ = run(capsys, "compile", "torus(4, 4)", "--collective", "allreduce", "--format", "msccl",
                          "-o", str(out), "--check", "--json")
    data = json.loads(stdout)
    assert code == 0 and data["check"]["ok"] and data["steps"] == 8
    assert out.read_text().startswith("<!-- fabricplan runtime=executor") and "<algo " in out.read_text()
    code, stdout, _ = run(capsys, "compile", str(out), "--check", "--runtime", "executor", "--json")
    assert code == 0 and json.loads(stdout)["ok"] and json.loads(stdout)["comm_steps"] == 8
    out.write_text('<?xml version="1.0"?>\n' + out.read_text())
    code, stdout, _ = run(capsys, "compile", str(out), "--check", "--runtime", "legacy", "--json")
    assert code == 1 and "lexical" in json.loads(stdout)["errors"][0]


def test_compile_options_and_refusals(capsys):
    code, stdout, err = run(capsys, "compile", "ring(8)", "--runtime", "legacy", "--max-bytes", "1048576")
    assert code == 0 and 'coll="allreduce"' in stdout and 'maxBytes="1048576"' in stdout
    assert json.loads(err)["xml_steps"] <= 120
    code, _, err = run(capsys, "compile", "ring(8)", "--runtime", "legacy", "--max-bytes", "0")
    assert code == 2 and "never used" in err
    code, _, err = run(capsys, "compile", "torus(4, 4)", "--runtime", "rccl", "--max-steps", "1", "--channels", "1",
                       "--consolidate", "no", "--max-chunks", "1")
    assert code == 2 and "nothing fits the rccl runtime" in err and "MSCCL_MAX_NUM_STEPS" in err
    code, _, err = run(capsys, "compile", "ring(8)", "--channels", "0")
    assert code == 2 and "--channels" in err


def test_compile_runtime_options(capsys, tmp_path):
    """Every compile option reaches the file: runtime, protocol, in-place mode, size window, channels, instances."""
    out = tmp_path / "ag.xml"
    code, stdout, _ = run(capsys, "compile", "hypercube(3)", "--collective", "allgather", "--runtime", "rccl",
                          "--proto", "LL128", "--inplace", "in", "--min-bytes", "4096", "--max-bytes", "1048576",
                          "--channels", "2", "--instances", "2", "-o", str(out), "--check", "--json")
    data = json.loads(stdout)
    assert code == 0 and data["check"]["ok"] and data["check"]["simulated"] == ["in-place"], data
    algo = out.read_text().splitlines()[1]
    for attr in ('proto="LL128"', 'inplace="1" outofplace="0"', 'minBytes="4096"', 'maxBytes="1048576"',
                 'nchannels="4"', 'coll="allgather"'):
        assert attr in algo, (attr, algo)
    assert data["runtime"] == "rccl" and data["instances"] == 2 and data["nchannels"] == 4
    code, _, err = run(capsys, "compile", "hypercube(3)", "--min-bytes", "10", "--max-bytes", "5")
    assert code == 2 and "minBytes" in err


def test_compile_oneccl_to_stdout(capsys):
    code, stdout, err = run(capsys, "compile", "circulant(7, 2, 3)", "--collective", "allgather",
                            "--format", "oneccl")
    assert code == 0 and "<" in stdout and json.loads(err)["fmt"] == "oneccl"


def test_compile_bad_input(capsys):
    code, _, err = run(capsys, "compile", "torus(4,", "--format", "msccl")
    assert code == 2 and "position" in err


def test_closed_stdout_ends_quietly():
    """`fabricplan bfb ... --json | head`: the reader goes away; no BrokenPipeError traceback, status 141."""
    proc = subprocess.Popen([sys.executable, "-m", "services.cli", "bfb", "ring(4)", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                       # before the command writes anything
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_compile_without_sizes_prints_no_empty_times(capsys, tmp_path):
    out = tmp_path / "r.xml"
    code, stdout, _ = run(capsys, "compile", "ring(8)", "-o", str(out))
    assert code == 0 and "time_us" not in stdout
    code, stdout, _ = run(capsys, "compile", "ring(8)", "-o", str(out), "--json")
    data = json.loads(stdout)
    assert code == 0 and "predicted_time_us" not in data and "schedule_time_us" not in data
    code, stdout, _ = run(capsys, "compile", "ring(8)", "-o", str(out), "--json", "--alpha-us", "10",
                          "--bandwidth-gbps", "100", "--size", "1048576")
    data = json.loads(stdout)
    assert code == 0 and data["predicted_time_us"]["1048576"] > 0


@pytest.mark.parametrize("argv,needle", [
    (["--runtime", "executor", "--dialect", "legacy"], "disagree"),
    (["--format", "oneccl", "--runtime", "rccl"], "--format oneccl"),
])
def test_compile_conflicting_runtime_options_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, "compile", "ring(8)", *argv)
    assert code == 2 and needle in err and out == ""


@pytest.mark.parametrize("argv,type_", [
    (["compile", "torus(4, 4)", "--runtime", "rccl", "--max-steps", "1", "--channels", "1", "--consolidate", "no",
      "--max-chunks", "1"], "refused"),
    (["bfb", "torus(4,"], "usage"),
    (["compile", "ring(8)", "--runtime", "executor", "--dialect", "legacy"], "usage"),
    (["bfb", "ring(4)", "--no-such-option"], "usage"),
])
def test_errors_under_json_are_json_objects_on_stderr(capsys, argv, type_):
    """Under --json every error is one JSON object on stderr (stdout stays empty), exit code 2."""
    try:
        code, out, err = run(capsys, *argv, "--json")
    except SystemExit as exc:                 # argparse's own errors exit from parse_args
        code, (out, err) = exc.code, capsys.readouterr()
    obj = json.loads(err)
    assert code == 2 and out == "" and obj["error"]["type"] == type_ and obj["error"]["exit_code"] == 2
    assert obj["error"]["message"]
    if type_ == "refused":
        assert obj["error"]["limit"] == "max_steps" and obj["error"]["maximum"] == 1


def test_migrate_bootstrap_key_is_written_once_and_never_printed(tmp_path):
    import os
    import stat

    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICPLAN_")}
    env["FABRICPLAN_DATA_DIR"] = str(tmp_path)
    key_file = tmp_path / "keys" / "scheduler.key"
    argv = [sys.executable, "-m", "services.cli", "migrate", "--bootstrap-key", str(key_file)]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    secret = key_file.read_text().strip()
    assert secret.startswith("fp_") and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert secret not in first.stdout + first.stderr and "mode 0600" in first.stderr
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and key_file.read_text().strip() == secret and "exists" in second.stderr
    from services.store import repo
    from services.store.db import session_scope

    with session_scope(f"sqlite:///{tmp_path}/fabricplan.db") as s:
        key = repo.find_key(s, secret)
        assert key is not None and key.role == "scheduler"
