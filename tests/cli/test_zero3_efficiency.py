"""`fabricplan train --zero3-efficiency` (docs/training.md, "ZeRO-3's implementation efficiency"): the knob reaches
the hybrid model's Job, a ZeRO-3 strategy priced at the schedules' rate (1.0) is faster than at the calibrated
DeepSpeed factor, and values outside (0, 1] exit 2 with the flag named."""

from __future__ import annotations

import json

import pytest

from services.cli import main
from services.jobs.requests.hybrid_workloads import hybrid_job
from services.jobs.requests.plan_spec import PlanSpec
from services.synthesis.evaluate.parallelism import ZERO3_EFFICIENCY

ARGS = (
    "train",
    "8",
    "3",
    "--model",
    "llama3-8b",
    "--gpus-per-host",
    "8",
    "--topology",
    "fat-tree",
    "--global-batch",
    "64",
    "--parallelism",
    "tp=1,pp=1,dp=64,zero=3,mb=1",
    "--json",
)


def _iteration(capsys, *extra: str) -> float:
    code = main([*ARGS, *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)["entries"][0]["iteration_s"]


def test_zero3_efficiency_prices_zero3_collectives(capsys):
    default = _iteration(capsys)
    assert _iteration(capsys, "--zero3-efficiency", str(ZERO3_EFFICIENCY)) == pytest.approx(default)
    assert _iteration(capsys, "--zero3-efficiency", "1.0") < default


@pytest.mark.parametrize("value", ["0", "-0.5", "1.5", "nan"])
def test_bad_zero3_efficiency_exits_2(capsys, value):
    code = main([*ARGS, "--zero3-efficiency", value])
    out, err = capsys.readouterr()
    assert code == 2 and "--zero3-efficiency must be in (0, 1]" in err + out


def test_zero3_efficiency_in_a_plan_request():
    spec = PlanSpec.load(
        {
            "job_id": "z3",
            "nodes": 8,
            "degree": 3,
            "alpha_us": 5,
            "bandwidth_gbps": 600,
            "workload": {"training": {"model": "llama3-8b", "gpus_per_host": 8, "zero3_efficiency": 0.5}},
        }
    )
    assert hybrid_job(spec)[0].zero3_efficiency == 0.5
