"""The compile stage's fork pool (issue 25, services.jobs.stages.compile_pool): units run in parallel in forked
processes; a process that is killed (a signal, or the unit time limit) fails only its own unit, with the reason;
a unit estimated above the memory budget runs alone; and the units of a stage (compile_units) tile each set."""
from __future__ import annotations

import os
import signal
import time

import pytest

from services.compiler.api import CompileOptions
from services.jobs.stages.compile_pool import run_units
from services.compiler.canonical import canonical_options
from services.compiler.runtimes.names import Runtime
from services.jobs.stages.compile_units import CompileUnit, plan_units, range_options, range_unit

from tests.conftest import HANG_S
from services.synthesis.schedule.ir import Collective

MiB = 1 << 20


def unit(name: str, estimated: int = MiB) -> CompileUnit:
    return CompileUnit("executor", name, None, CompileOptions("executor"), estimated_bytes=estimated)


def test_a_killed_process_fails_only_its_unit(tmp_path):
    def run_one(u: CompileUnit) -> None:
        if u.collective == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        if u.collective == "slow":
            time.sleep(30)
        (tmp_path / u.collective).write_text(str(os.getpid()))

    failed = {}
    run_units([unit("a"), unit("killed"), unit("slow"), unit("b")], run_one,
              lambda u, why: failed.setdefault(u.collective, why), processes=4, budget_bytes=64 * MiB,
              time_limit_s=1.0)
    assert set(failed) == {"killed", "slow"}
    assert not (tmp_path / "slow").exists() and not (tmp_path / "killed").exists()   # both ended where they were
    assert "SIGKILL" in failed["killed"] and "time limit of 1 s" in failed["slow"]
    pids = {(tmp_path / n).read_text() for n in ("a", "b")}
    assert len(pids) == 2 and str(os.getpid()) not in pids          # each in a process of its own


def test_a_unit_above_the_budget_runs_alone(tmp_path):
    def run_one(u: CompileUnit) -> None:
        start = time.monotonic()
        (tmp_path / f"{u.collective}.started").touch()
        if u.collective in ("s2", "s3"):                # these two meet: each waits until the other has started
            other = tmp_path / ("s3.started" if u.collective == "s2" else "s2.started")
            deadline = time.monotonic() + HANG_S
            while not other.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            time.sleep(0.2)
        (tmp_path / u.collective).write_text(f"{start} {time.monotonic()}")

    done = []
    run_units([unit("s1", 10 * MiB), unit("big", 100 * MiB), unit("s2", 10 * MiB), unit("s3", 10 * MiB)], run_one,
              lambda u, why: pytest.fail(why), processes=3, budget_bytes=64 * MiB,
              time_limit_s=30, on_done=lambda u, k, n: done.append((u.collective, k, n)))
    spans = {n: tuple(map(float, (tmp_path / n).read_text().split())) for n in ("s1", "big", "s2", "s3")}
    b0, b1 = spans["big"]
    for n in ("s1", "s2", "s3"):
        lo, hi = spans[n]
        assert hi <= b0 or lo >= b1, n                  # nothing ran beside the unit above the budget
    assert spans["s2"][0] < spans["s3"][1] and spans["s3"][0] < spans["s2"][1]   # the small ones in parallel
    assert [k for _, k, _ in done] == [1, 2, 3, 4] and {n for _, _, n in done} == {4}


ROWS = [{"min_bytes": 0, "max_bytes": 4096}, {"min_bytes": 4096, "max_bytes": 1 << 28},
        {"min_bytes": 1 << 28, "max_bytes": None}]


def test_units_tile_each_set_and_say_what_has_no_file():
    digests = {"allgather": "m", "allgather@0": "r0", "allgather@1": "r1", "allgather@2": "r2",
               "allreduce": "x", "allreduce@0": "x"}
    units, skipped = plan_units(["executor", "legacy", "oneccl"], ["allgather", "allreduce"],
                                {"allgather": ROWS, "allreduce": [{"min_bytes": 0, "max_bytes": None}]},
                                digests, {})
    ex = [(u.options.min_bytes, u.options.max_bytes) for u in units if u.runtime == "executor" and u.index is not None
          and u.collective == "allgather"]
    assert ex == [(None, 4095), (4096, (1 << 28) - 1), (1 << 28, None)]     # canonical: 0 is the default
    legacy = [u for u in units if u.runtime == "legacy" and u.collective == "allgather" and u.index is not None]
    assert [(u.options.min_bytes, u.options.max_bytes) for u in legacy] == [(None, 4096), (4096, None)]
    assert "legacy:allgather@2" in skipped and "oneccl:allgather" in skipped
    alias = [u for u in units if u.collective == "allreduce" and u.index == 0]
    assert alias and all(u.alias for u in alias)            # one range, the main schedule: the main file
    assert units[-1].collective == "allreduce"
    with pytest.raises(Exception, match="min_bytes"):
        range_options(CompileOptions("executor", min_bytes=5), ROWS, 0)


def test_a_range_unit_is_resolved_in_one_place():
    """The compile stage's units and the API's `?range=` download resolve a range's file alike (range_unit):
    the window, the canonical options its compile job is keyed by, and whether it is the main file; an
    on-demand job's unit comes back from its row's name and options."""
    digests = {"allgather": "m", "allgather@0": "r0", "allgather@1": "r1", "allgather@2": "r2"}
    units, _ = plan_units(["rccl"], ["allgather"], {"allgather": ROWS}, digests, {})
    ranged = [u for u in units if u.index is not None]
    assert ranged == [range_unit("allgather", i, CompileOptions("rccl"), ROWS, f"r{i}", "m")
                      for i in range(len(ROWS))]
    assert all(u.target is Runtime.RCCL and u.kind is Collective.ALLGATHER and not u.alias for u in ranged)
    assert ranged[1].options.key() == canonical_options(range_options(CompileOptions("rccl"), ROWS, 1),
                                                        "allgather").key()
    again = CompileUnit.of_job(ranged[1].name, ranged[1].options)
    assert (again.name, again.label, again.options) == ("allgather@1", "rccl:allgather@1", ranged[1].options)
    with pytest.raises(ValueError):
        CompileUnit.of_job("allgathr@1", CompileOptions("rccl"))


@pytest.fixture
def instant_kill(monkeypatch):
    monkeypatch.setenv("FABRICPLAN_COMPILE_UNIT_TIME_LIMIT_S", "0.001")


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)      # the pool, not the database, is tested
def test_killed_compiles_fail_their_files_not_the_plan(instant_kill, client):
    """Embedded deployment: every compile process outlives the unit time limit and is killed; the plan is done,
    each file failed with that reason (listed in compile_failed), and the verified schedules are served."""
    from tests.conftest import MINIMAL, unique_job, wait_done

    p = wait_done(client, client.post("/v1/plans", json={**MINIMAL, "job_id": unique_job()}).json()["id"])
    assert p["status"] == "done", p["reason"]
    failed = p["compile_failed"]
    files = {f["file"] for f in failed}
    assert {"allgather", "reducescatter", "allreduce"} <= files
    assert all("time limit of 0.001 s" in f["reason"] for f in failed), failed
    assert p["compiled"]["executor"]["allgather"]["status"] == "failed"
    r = client.get(f"/v1/plans/{p['id']}/schedules/allgather", params={"format": "msccl"})
    assert r.status_code == 422 and "time limit" in r.json()["errors"][0]["msg"]
    assert client.get(f"/v1/plans/{p['id']}/schedules/allgather", params={"format": "npz"}).status_code == 200


def test_a_range_finer_than_a_file_holds_gets_the_fittest_schedule_that_fits():
    """range_files.substitute: among the set's other schedules that fit the chunk bound and the chunked BFB,
    the smallest worst-case ratio over the range (checked against every candidate at many sizes)."""
    import numpy as np

    from services.compiler.lowering.grid import chunked_bfb, chunks_per_shard
    from services.jobs.stages.range_files import substitute, worst_ratio
    from services.synthesis.bfb.greedy import greedy_allgather
    from services.synthesis.forest.packing import pack_trees
    from services.synthesis.forest.pipeline import pipelined_allgather
    from services.synthesis.schedule.cost import LinkModel, measured_tau
    from services.synthesis.schedule.verify import verify
    from services.synthesis.topology.catalog import build

    g = build("torus(3, 4)")
    link = LinkModel.from_units(10, 100)
    trees = pipelined_allgather(pack_trees(g, np.ones(g.arcs)), 8)
    bound = chunks_per_shard(trees) - 1
    others = {"greedy/1 (range 0)": greedy_allgather(g, chunks=1).schedule,
              "too fine (range 2)": pipelined_allgather(pack_trees(g, np.ones(g.arcs)), 16)}
    lo, hi = 1 << 20, 1 << 30
    name, held, ratio = substitute(trees, g, others, link, lo, hi, bound)
    assert name != "too fine (range 2)" and chunks_per_shard(held) <= bound and verify(held, g).ok
    line = lambda s: (s.steps, measured_tau(s, g.degree))
    cands = {"greedy/1 (range 0)": others["greedy/1 (range 0)"], f"chunked-bfb/{bound}": chunked_bfb(g, trees.collective,
                                                                                                     bound)}
    for m in np.linspace(lo, hi - 1, 7):
        t = link.time(*line(held), m) / link.time(*line(trees), m)
        assert t <= ratio * (1 + 1e-12)
    assert ratio == min(worst_ratio(line(s), line(trees), link, lo, hi) for s in cands.values())


def test_collect_returns_what_the_child_computed():
    """`collect` gets each child's return value in the parent (a child that died is failed instead, with no
    value)."""
    def run_one(u: CompileUnit):
        if u.collective == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        return {"pid": os.getpid(), "name": u.collective, "big": bytes(200_000)}   # more than a pipe holds

    got, failed = {}, {}
    run_units([unit("a"), unit("killed"), unit("b")], run_one, lambda u, why: failed.setdefault(u.collective, why),
              processes=2, budget_bytes=64 * MiB, time_limit_s=30, collect=lambda u, v: got.setdefault(u.collective, v))
    assert set(got) == {"a", "b"} and set(failed) == {"killed"}
    assert got["a"]["name"] == "a" and got["a"]["pid"] != os.getpid() and len(got["b"]["big"]) == 200_000
