"""The evaluation job (POST /v1/topologies/evaluate; the request side is services.jobs.requests.evaluation_request): the
optimal BFB schedule of one topology for one collective, model-checked, with the cost measured from the
schedule itself, or on priced links the fastest verified schedule of BFB and the greedy scheduler; or, for a
request of kind `cluster` (POST /v1/cluster/simulations, services.jobs.requests.cluster_request), a shared-cluster
simulation. It runs in
a worker (`run`) under the task time and memory limits.
"""
from __future__ import annotations

import time

from services.synthesis.bfb.compare import schedule_collectives
from services.synthesis.bfb.lp import bfb_allgather, bfb_schedule
from services.synthesis.schedule.ir import Collective
from services.synthesis.schedule.report import schedule_summary
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build

from services.config import get_settings
from services.store import job_metrics, notify
from services.store.db import session_scope
from services.store.models import Evaluation, utcnow
from services.jobs.stages.artifacts import topology_facts, topology_json
from services.jobs.stages.attempts import claim
from services.jobs.requests import cluster_request
from services.jobs.requests.evaluation_request import WITH_ARCS_MAX_NODES, link_costs

__all__ = ["run"]


def run(evaluation_id: str) -> dict:
    """The worker's part: BFB schedule, model check, summary, stored with the evaluation."""
    url = get_settings().sqlalchemy_url
    with session_scope(url) as s:
        claim(s, evaluation_id, "evaluation")
        ev = s.get(Evaluation, evaluation_id)
        ev.status, ev.stage, ev.updated_at = "running", "schedule", utcnow()
        request = dict(ev.request)
    if request.get("kind") == cluster_request.KIND:         # a shared-cluster simulation
        return _store(url, evaluation_id, cluster_request.run(request))
    topo = build(request["expr"])
    coll = Collective.parse(request["collective"])
    t0 = time.perf_counter()
    extra = {}
    if request.get("links"):
        extra, report = _heterogeneous(topo, coll, request["links"])
    else:
        ag = bfb_allgather(topo, workers=1)
        sched = bfb_schedule(topo, coll, allgather=ag.schedule, workers=1)
        report = verify(sched, topo)
    seconds = time.perf_counter() - t0
    if not report.ok:
        raise RuntimeError(f"the {coll.value} schedule of {topo.expr} failed model checking: "
                           f"{report.violation.message}")
    result = {**schedule_summary(topo, report, seconds, coll), **topology_facts(topo), **extra}
    if topo.nodes <= WITH_ARCS_MAX_NODES:               # small enough to draw: kept for with_arcs requests
        drawing = topology_json(topo)
        result.update({k: drawing.get(k) for k in ("arcs", "permutation")})
    return _store(url, evaluation_id, result)


def _store(url: str, evaluation_id: str, result: dict) -> dict:
    """The evaluation done with its result (under the attempt's claim), and everyone waiting on it told."""
    with session_scope(url) as s:
        claim(s, evaluation_id, "evaluation")
        ev = s.get(Evaluation, evaluation_id)
        ev.status, ev.stage, ev.result, ev.reason, ev.updated_at = "done", "done", result, None, utcnow()
        job_metrics.job_ended(s, "evaluation", "done", ev.created_at, ev.updated_at)
        notify.changed(s, "evaluation", evaluation_id)
    return {"done": True}


def _heterogeneous(topo, coll, links: dict):
    """Per-link costs: BFB of LP (14), BFB, the greedy scheduler, the tree packing (up to 128 nodes) and BFB
    without the slower links priced on the links, the fastest that passes the model checker served
    (services.synthesis.bfb.compare). Returns (result fields, its VerificationReport)."""
    costs = link_costs(topo, links)
    schedulers = ("bfb", "greedy") if costs.uniform_model is not None else \
        ("bfb-hetero", "bfb", "greedy", "trees", "bfb-fast")
    cmp = schedule_collectives(topo, costs, float(links["size_bytes"]), collectives=(coll,),
                               schedulers=schedulers)[coll]
    chosen = cmp.chosen
    return ({"heterogeneous": True, "scheduler": chosen.scheduler, "time_us": chosen.time_s * 1e6,
             "candidates": [c.as_dict() for c in cmp.candidates]}, chosen.report)
