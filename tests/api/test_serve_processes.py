"""`serve --workers N` (embedded, several API processes on one SQLite file, each with its own worker): a plan
one process runs is supervised by that process alone; the others neither count it lost nor send it again
(services.store.jobs.lost / undispatched with the job's holder, services.api.dispatch)."""
from __future__ import annotations

import httpx

from tests.conftest import MINIMAL, unique_job, wait_done
from tests.served import served, service_env


def _both_up(base: str) -> bool:
    """Both processes' embedded workers beat (either process may answer: each reports both rows)."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    return "fabricplan_workers_alive 2.0" in text


def test_plans_run_by_one_process_are_not_failed_by_the_others_sweep(tmp_path):
    """Each process's lost-worker sweep (every 0.2 s here, after its first `stale_plan_s` = 5 s) used to find
    the other process's running plans not in its own worker's `held` set, count them lost at once and, after
    three losses, fail them ("ended without recording an outcome; its worker was lost 3 times"). Four plans of
    64 nodes, one after another, each runs long enough to meet the other process's sweep."""
    env = service_env(tmp_path / "served", FABRICPLAN_STALE_PLAN_S="5", FABRICPLAN_SWEEP_S="0.2")
    with served(env, "--workers", "2", ready=_both_up) as (base, _):
        with httpx.Client(base_url=base, timeout=30) as c:
            ended = []
            for _ in range(4):
                body = {**MINIMAL, "nodes": 64, "degree": 4, "job_id": unique_job()}
                ended.append(wait_done(c, c.post("/v1/plans", json=body).json()["id"]))
    assert [(p["status"], p.get("reason")) for p in ended] == [("done", None)] * 4
