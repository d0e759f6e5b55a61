"""`fabricplan train --moe-host-us` and `workload.training.moe_host_us` (docs/training.md, "Mixture of experts",
host time): the knob reaches the hybrid model's Job, an MoE job with more host time per expert is slower and 0
removes the host term from the breakdown, and values outside [0, 10000] exit 2 (HTTP 422) with the field named."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from services.cli import main
from services.jobs.requests.hybrid_workloads import hybrid_job
from services.jobs.requests.plan_spec import PlanSpec
from services.synthesis.evaluate.moe import HOST_EXPERT_S

ARGS = ("train", "4", "3", "--model", "mixtral-8x7b", "--gpus-per-host", "8", "--topology", "fat-tree",
        "--device", "h100", "--global-batch", "64", "--parallelism", "tp=2,pp=1,dp=16,ep=8,zero=1,mb=1", "--json")


def _entry(capsys, *extra: str) -> dict:
    code = main([*ARGS, *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)["entries"][0]


def test_moe_host_time_prices_the_experts_host_work(capsys):
    default = _entry(capsys)
    assert default["breakdown"]["exposed_host_s"] > 0
    same = _entry(capsys, "--moe-host-us", str(HOST_EXPERT_S * 1e6))
    assert same["iteration_s"] == pytest.approx(default["iteration_s"])
    graphed = _entry(capsys, "--moe-host-us", "0")
    assert graphed["breakdown"]["exposed_host_s"] == 0.0
    assert graphed["iteration_s"] == pytest.approx(default["iteration_s"] - default["breakdown"]["exposed_host_s"])
    assert _entry(capsys, "--moe-host-us", "100")["iteration_s"] > default["iteration_s"]


@pytest.mark.parametrize("value", ["-1", "10001", "nan", "inf"])
def test_bad_moe_host_time_exits_2(capsys, value):
    code = main([*ARGS, "--moe-host-us", value])
    out, err = capsys.readouterr()
    assert code == 2 and "--moe-host-us must be in [0, 10000]" in err + out


def _spec(value) -> dict:
    return {"job_id": "h", "nodes": 8, "degree": 3, "alpha_us": 5, "bandwidth_gbps": 600,
            "workload": {"training": {"model": "mixtral-8x7b", "gpus_per_host": 8, "moe_host_us": value}}}


def test_moe_host_time_in_a_plan_request():
    assert hybrid_job(PlanSpec.load(_spec(0)))[0].host_expert_s == 0.0
    assert hybrid_job(PlanSpec.load(_spec(50)))[0].host_expert_s == pytest.approx(50e-6)
    for bad in (-1, 10001, float("nan")):
        with pytest.raises(ValidationError, match="moe_host_us"):
            PlanSpec.load(_spec(bad))


def test_text_table_has_the_host_column(capsys):
    code = main([a for a in ARGS if a != "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.lstrip().startswith("iteration s"))
    assert header.split()[-3:] == ["host", "GB/GPU", "topology"]
