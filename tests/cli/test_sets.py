"""`fabricplan schedule --links / --by-size` and `fabricplan compile --by-size` (issue 26)."""
import glob
import json
import os
import re

import pytest

from services.cli import main
from services.compiler.api import check_xml
from services.synthesis.schedule.dependency import dependency_time
from services.synthesis.schedule.ir import Schedule
from services.synthesis.schedule.links import link_costs_from_json
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build

LINKS = {"default": {"alpha_us": 10, "bandwidth_gbps": 25},
         "links": [{"arc": "0>1", "bandwidth_gbps": 5}, {"arc": "5>6", "bandwidth_gbps": 5},
                   {"arc": "7>4", "bandwidth_gbps": 5}]}


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def links(tmp_path):
    path = tmp_path / "links.json"
    path.write_text(json.dumps(LINKS))
    return str(path)


def test_schedule_links_serves_trees_and_reports_measured_time(capsys, links, tmp_path):
    out_file = str(tmp_path / "s.npz")
    code, out, _ = run(capsys, "schedule", "torus(3, 4)", "--links", links, "--size", str(1 << 30), "--json",
                       "-o", out_file)
    data = json.loads(out)
    assert code == 0 and data["scheduler"] == "trees" and data["verified"] is True
    g = build("torus(3, 4)")
    with open(out_file, "rb") as fh:
        s = Schedule.from_bytes(fh.read())
    costs = link_costs_from_json(g, LINKS)
    assert verify(s, g).ok and data["steps"] == s.steps
    assert data["time_us"] == pytest.approx(dependency_time(s, costs, 1 << 30) * 1e6, rel=1e-9)
    assert data["barrier_time_us"] == pytest.approx(costs.time(s, 1 << 30) * 1e6, rel=1e-9)
    others = {c["scheduler"]: c["time_us"] for c in data["schedulers"] if "time_us" in c}
    assert data["time_us"] <= min(others.values())


def test_schedule_by_size_tiles_and_pairs_phases(capsys, links):
    code, out, _ = run(capsys, "schedule", "torus(3, 4)", "--collective", "allreduce", "--by-size", "--links",
                       links, "--json")
    data = json.loads(out)
    rows = data["by_size"]
    assert code == 0 and rows[0]["min_bytes"] == 0 and rows[-1]["max_bytes"] is None
    assert all(a["max_bytes"] == b["min_bytes"] for a, b in zip(rows, rows[1:]))
    assert {"min_bytes", "max_bytes", "scheduler", "steps", "tau"} <= rows[0].keys()
    assert all(r["verified"] for r in rows)
    # large sizes: a scheduler built for the slow links (TACOS or the tree packing), not the small sizes' BFB
    assert rows[-1]["scheduler"].split("/")[0] in ("greedy", "trees") and rows[-1]["scheduler"] != rows[0]["scheduler"]


@pytest.mark.parametrize("runtime", ["executor", "legacy"])
def test_compile_by_size_writes_one_parsable_file_per_range(capsys, links, tmp_path, runtime):
    out_dir = str(tmp_path / "set")
    extra = ["--max-bytes", str(1 << 32)] if runtime == "legacy" else []
    code, out, _ = run(capsys, "compile", "torus(3, 4)", "--collective", "allgather", "--by-size", "--links",
                       links, "--runtime", runtime, "-o", out_dir, "--json", *extra)
    data = json.loads(out)
    files = data["files"]
    assert code == 0 and len(files) == len(glob.glob(os.path.join(out_dir, "*.xml"))) >= 2
    for i, f in enumerate(files):
        text = open(f["file"], encoding="utf-8").read()
        lo, hi = (int(x) for x in re.search(r'minBytes="(\d+)" maxBytes="(\d+)"', text).groups())
        assert lo == f["min_bytes"]
        last = i == len(files) - 1
        if runtime == "executor":           # inclusive window, 0 = unbounded
            assert hi == (0 if last else f["max_bytes"] - 1)
        else:                               # exclusive window, finite: the files end at --max-bytes
            assert hi == (1 << 32 if last else f["max_bytes"]) and lo < 1 << 32
        assert check_xml(text, "msccl", runtime=runtime).ok
    if runtime == "legacy":                 # the set's ranges from --max-bytes up have no file, and are reported
        _, out, _ = run(capsys, "schedule", "torus(3, 4)", "--collective", "allgather", "--by-size", "--links", links,
                        "--json")
        beyond = [r["min_bytes"] for r in json.loads(out)["by_size"] if r["min_bytes"] >= 1 << 32]
        assert len(files) + len(beyond) == len(json.loads(out)["by_size"])
        assert data.get("not_written", {}).get("min_bytes") == (beyond[0] if beyond else None)


@pytest.mark.parametrize("argv,needle", [
    (["schedule", "ring(4)", "--collective", "alltoall", "--by-size"], "--by-size"),
    (["compile", "ring(4)", "--collective", "allgather", "--by-size"], "-o"),
    (["compile", "ring(4)", "--collective", "allgather", "--by-size", "--runtime", "oneccl", "-o", "/tmp/x"],
     "oneCCL"),
    (["compile", "ring(4)", "--links", "/nonexistent"], "--links"),
])
def test_set_usage_errors(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert code == 2 and needle in err


def test_schedule_links_serves_the_sets_tree_allreduce(capsys, tmp_path):
    """`schedule --links --size M --collective allreduce` prices the trees as the schedule set serves them at M:
    the set's pair of phase schedules, not each phase's own fastest chunk count (on these links at 1 MiB
    the latter is 2.3 % slower)."""
    import numpy as np

    from services.synthesis.bfb.schedule_sets import schedule_sets
    from services.synthesis.schedule.ir import Collective

    g = build("torus(4, 4)")
    rng = np.random.default_rng(5)
    gbps = np.full(g.arcs, 100.0)
    gbps[rng.choice(g.arcs, 5, replace=False)] = 25.0
    alpha_us = rng.uniform(2.0, 12.0, g.arcs)
    table = {"links": [{"arc": f"{int(t)}>{int(h)}", "alpha_us": float(a), "bandwidth_gbps": float(b)}
                       for t, h, a, b in zip(g.tails, g.heads, alpha_us, gbps)]}
    path = tmp_path / "links.json"
    path.write_text(json.dumps(table))
    size = 1 << 20
    code, out, _ = run(capsys, "schedule", "torus(4, 4)", "--collective", "allreduce", "--links", str(path),
                       "--size", str(size), "--json")
    assert code == 0
    trees = next(c for c in json.loads(out)["schedulers"] if c["scheduler"] == "trees")
    costs = link_costs_from_json(g, table)
    served = schedule_sets(g, costs, (Collective.ALLREDUCE,), schedulers=("trees",))[Collective.ALLREDUCE].at(size)
    assert trees["time_us"] == pytest.approx(served.time_s(size) * 1e6, rel=1e-9)
