"""A training job over the frontier and the baselines (costs from verified schedules) and the CLI commands
`train` and `schedule --collective alltoall`."""
from __future__ import annotations

import json
from fractions import Fraction

import pytest

from services.cli import main
from services.synthesis.evaluate.baselines import shifted_ring
from services.synthesis.evaluate.iteration import CollectiveCost
from services.synthesis.evaluate.training import allreduce_cost, evaluate_training
from services.synthesis.evaluate.training_job import parse_model_spec
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.verify import verify
from services.synthesis.search.construct import construct
from services.synthesis.topology.catalog import build

LINK = LinkModel.from_units(10, 100)
MOE = {"name": "small-moe", "buckets_bytes": [1 << 20, 1 << 24], "layers": [
    {"name": "embed", "params_bytes": 8 << 20, "forward_s": 0.0005, "backward_s": 0.001},
    {"name": "attn", "params_bytes": 4 << 20, "forward_s": 0.002, "backward_s": 0.004},
    {"name": "experts", "params_bytes": 1 << 16, "forward_s": 0.003, "backward_s": 0.006,
     "moe_tokens_bytes": 4 << 20, "expert_params_bytes": 64 << 20},
    {"name": "head", "params_bytes": 2 << 20, "forward_s": 0.001, "backward_s": 0.002}]}


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_allreduce_cost_is_measured_per_collective():
    # generalized Kautz Pi_{2,9} is not reverse-symmetric: its reduce-scatter (BFB on the transpose) costs
    # tau 10/9, its allgather 14/9, so the allreduce is 24/9, not twice the allgather (28/9)
    ag = construct("genkautz(2, 9)", Collective.ALLGATHER)
    assert verify(ag.schedule, ag.topology).tau == Fraction(14, 9)
    assert allreduce_cost("genkautz(2, 9)") == CollectiveCost(6, Fraction(8, 3))


def test_frontier_and_baselines():
    model = parse_model_spec(MOE)
    ev = evaluate_training(model, 16, 4, LINK)
    kinds = {e.kind for e in ev.entries}
    assert kinds == {"frontier", "baseline"}
    names = {e.name for e in ev.entries if e.kind == "baseline"}
    assert {"shifted_ring", "shifted_bfb_ring", "torus_classic", "torus_bfb"} <= names
    ours = [e for e in ev.entries if e.kind == "frontier"]
    assert ev.best is min(ours, key=lambda e: e.report.iteration_s)
    for e in ev.entries:
        assert e.report.iteration_s >= e.lower_bound_s * (1 - 1e-12) >= ev.lower_bound_s * (1 - 1e-9)
        assert e.report.bucket_bytes in model.buckets_bytes and e.report.alltoalls == 4
        assert e.alltoall["source"] == "mcf" and e.alltoall["throughput"] > 0
    # the allreduce costs are the verified schedules' (frontier: the construction; baseline: its own schedule)
    first = ours[0]
    built = construct(first.expr, Collective.ALLREDUCE)
    rep = verify(built.schedule, built.topology)
    assert first.costs.allreduce == CollectiveCost(rep.steps, rep.tau)
    ring = next(e for e in ev.entries if e.name == "shifted_ring")
    b = shifted_ring(16)
    rep = verify(b.schedule(Collective.ALLREDUCE), b.topology)
    assert ring.costs.allreduce == CollectiveCost(rep.steps, rep.tau) == CollectiveCost(30, Fraction(15, 8))
    data = ev.to_dict()
    assert data["best"] == ev.best.expr and data["lower_bound_s"] == ev.lower_bound_s
    assert {"expr", "iteration_s", "compute_s", "exposed_allreduce_s", "alltoall_s", "bucket_bytes", "allreduce",
            "alltoall", "lower_bound_s"} <= data["entries"][0].keys()


def test_alltoall_from_schedules_and_dense_models():
    model = parse_model_spec(MOE)
    ev = evaluate_training(model, 16, 4, LINK, topologies=[build("torus(4, 4)")], baselines=(),
                           alltoall="schedule")
    (e,) = ev.entries
    assert e.kind == "topology" and e.alltoall["source"] == "schedule"
    a2a = e.costs.alltoall_schedule
    assert e.report.alltoall_s == pytest.approx(4 * a2a.time_s(LINK, 4 << 20))
    assert a2a.tau == Fraction(2)                                # torus(4, 4) reaches the MCF bound exactly
    dense = parse_model_spec({**MOE, "layers": [l for l in MOE["layers"] if "moe_tokens_bytes" not in l]})
    ev = evaluate_training(dense, 16, 4, LINK, topologies=[build("torus(4, 4)")], baselines=())
    assert ev.entries[0].alltoall == {} and ev.entries[0].report.alltoall_s == 0
    with pytest.raises(ValueError, match="not 32"):
        evaluate_training(dense, 32, 4, LINK, topologies=[build("torus(4, 4)")])
    with pytest.raises(ValueError):
        evaluate_training(dense, 16, 4, LINK, alltoall="guess")


def test_cli_train_json(capsys, tmp_path):
    path = tmp_path / "moe.json"
    path.write_text(json.dumps(MOE))
    code, out, _ = run(capsys, "train", "16", "4", "--model", str(path), "--alpha-us", "10",
                       "--bandwidth-gbps", "100", "--json")
    assert code == 0
    data = json.loads(out)
    assert {"entries", "best", "lower_bound_s"} <= data.keys()
    entry = data["entries"][0]
    assert {"expr", "iteration_s", "compute_s", "exposed_allreduce_s", "alltoall_s", "bucket_bytes"} <= entry.keys()
    assert {"steps", "tau"} <= entry["allreduce"].keys() and "throughput" in entry["alltoall"]
    assert data["best"] in [e["expr"] for e in data["entries"] if e["kind"] == "frontier"]
    code, out, _ = run(capsys, "train", "16", "4", "--model", "resnet50", "--alpha-us", "10", "--bandwidth-gbps",
                       "100", "--topology", "torus(4, 4)")
    assert code == 0 and "*torus(4, 4)" in out and "shifted_ring" in out


@pytest.mark.parametrize("argv, message", [
    (["--model", "nosuch"], "neither a catalogued model"),
    (["--model", "switch-c-2048", "--batch", "0"], "batch"),
    (["--model", "resnet50", "--topology", "torus(4, 8)"], "not 16 and 4"),
    (["--model", "resnet50", "--alpha-us", "-1"], "alpha"),
    (["--model", "BAD_FILE"], "layers.0.backward_s"),
    (["--model", "NOT_JSON"], "not a readable JSON"),
    (["--model", "GROUPS_OF_3"], "expert_parallel=3 must divide the 16 nodes"),
])
def test_cli_train_bad_input(capsys, tmp_path, argv, message):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "m", "layers": [{"name": "a", "params_bytes": 1, "forward_s": 1, "backward_s": -1}]}')
    junk = tmp_path / "junk.json"
    junk.write_text("{")
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({**MOE, "expert_parallel": 3}))
    argv = [{"BAD_FILE": str(bad), "NOT_JSON": str(junk), "GROUPS_OF_3": str(groups)}.get(a, a) for a in argv]
    base = ["train", "16", "4", "--alpha-us", "10", "--bandwidth-gbps", "100"]
    code, _, err = run(capsys, *base, *argv)
    assert code == 2 and message in err


def test_cli_schedule_alltoall(capsys, tmp_path):
    out_file = tmp_path / "a2a.npz"
    code, out, _ = run(capsys, "schedule", "hypercube(3)", "--collective", "alltoall", "--json", "-o", str(out_file))
    data = json.loads(out)
    assert code == 0 and data["verified"] is True and data["collective"] == "alltoall"
    assert data["tau"] == pytest.approx(data["mcf_tau"]) and data["steps"] == 3
    s = Schedule.from_bytes(out_file.read_bytes())
    assert s.collective is Collective.ALLTOALL and verify(s, build("hypercube(3)")).ok


@pytest.mark.parametrize("argv", [
    ["bfb", "torus(4, 4)", "--collective", "alltoall"],
    ["select", "16", "4", "--alpha-us", "10", "--bandwidth-gbps", "100", "--size", "1000", "--collective", "alltoall"],
    ["schedule", "torus(4, 4)", "--collective", "alltoall", "--steps", "2"],
    ["schedule", "torus(4, 4)", "--steps", "5"],
])
def test_cli_alltoall_where_it_does_not_apply(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.startswith("fabricplan: error:")


def test_cli_train_more_nodes_than_experts(capsys):
    # `train 256 4 --model switch-base-128` was refused ("expert parallelism over all nodes allows at most 128
    # nodes"); it runs expert-data parallelism: two groups of 128 nodes, each expert on 2 nodes
    code, out, err = run(capsys, "train", "256", "4", "--model", "switch-base-128", "--alpha-us", "10",
                         "--bandwidth-gbps", "100", "--topology", "torus(16, 16)", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["nodes"] == 256 and data["best"] == "torus(16, 16)"
    entry = next(e for e in data["entries"] if e["expr"] == "torus(16, 16)")
    assert entry["alltoall_s"] > 0 and entry["iteration_s"] >= data["lower_bound_s"]
