"""The plan revision job (DESIGN 4.9): a done plan's topology after link failures, built by a worker

    repair -> schedules -> compile -> finish                (workers.tasks.revision_workflow)

- **repair** (first, so a patch panel's robot starts at once): with `repair` requested and the plan bound to
  a fabric, every arc on a faulty panel port is wired again on spare ports of its hosts (services.fabric.
  repair): new cross-connects, new panel config versions, a `repairs` row pending until the panels apply them.
- **schedules**: the degraded topology (the failed arcs removed) and its allgather, reduce-scatter and
  allreduce schedules from `bfb.degraded.degraded_schedules` (BFB and the greedy scheduler priced at the
  workload's mean size, the faster verified one served; every served schedule passes the model checker),
  stored as artifacts under the revision's prefix ("rev{n}:schedule:allreduce", ...), with link loads checked
  against the measured tau (services.jobs.stages.artifacts.link_loads_blob) and the topology as JSON and GraphML;
  and per collective a schedule set by size (services.jobs.stages.size_sets: "rev{n}:schedule:allreduce@0", ...).
  When the workload has an all-to-all, the degraded topology's all-to-all as the plan builds it (services.jobs.
  alltoall_build: the time-stepped LP schedule, model-checked, stored as "rev{n}:schedule:alltoall" with its
  loads; past the LP's limit, the pipelined tree routing of LP (3) by column generation); when both are beyond
  the library's limits, the LP (3) throughput bracket plan selection prices an all-to-all with, charged at its
  lower end (`alltoall.status` "approximate", no schedule).
- **compile**: the plan's compile stage (services.jobs.stages.compile_stage) on the revision's schedules.
- **finish**: predicted times per collective and size (from the sets), the workload time, and the cost of the failure
  against revision 0 and against the naive fallback, the all-to-all's per size, and for a training plan the
  iteration on the degraded topology (`failure_cost.training`; services.jobs.stages.revision_cost).

Recording the failure that queues a revision, and the restored revision after a repair, happen on the request
side (services.jobs.requests.failure_reports). A revision is a job like a plan (outbox, attempts, heartbeats:
services.store.jobs), and a finished revision is never written again.
"""
from __future__ import annotations

import json
import time

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy import select

from services.fabric.repair import RepairError, repatch
from services.synthesis.bfb.degraded import degraded_schedules
from services.synthesis.bfb.lp import default_workers
from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.topology.catalog import build

from services.config import get_settings
from services.store import fabrics, job_metrics, notify, repo, stage_events
from services.store.db import session_scope
from services.store.models import PanelRow, Plan, PlanBinding, PlanEvent, PlanRevision, PortFault, Repair, utcnow
from services.jobs.stages import compile_stage, size_sets
from services.jobs.stages.alltoall_build import AllToAllRefused, bracket_result, build_checked, built_result
from services.jobs.stages.artifacts import link_loads_blob, topology_facts, topology_graphml, topology_json
from services.jobs.stages.attempts import claim
from services.jobs.stages.revision_cost import barrier_times, failure_cost, predicted_times, training_cost, workload_us
from services.jobs.stages.stage_weights import revision_progress
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.requests.workloads import alltoall_sizes, has_alltoall, workload_items

__all__ = ["stage_repair", "stage_schedules", "stage_compile", "stage_finish", "mean_size"]


def _url() -> str:
    return get_settings().sqlalchemy_url


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (a BFB pool's workers)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _claim(s, revision_id: str) -> PlanRevision:
    claim(s, revision_id, "revision")
    return s.get(PlanRevision, revision_id)


def _advance(revision_id: str, stage: str, local: float) -> None:
    """The revision at the fraction `local` of `stage`: its progress weighted by the stages' measured costs
    (services.jobs.stages.stage_weights, never backwards); a new stage is recorded in the plan's events as
    `rev{n}:{stage}` and closes the previous one with its start, end and duration (services.store.stage_events)."""
    with session_scope(_url()) as s:
        rev = _claim(s, revision_id)
        plan = s.get(Plan, rev.plan_id)
        progress = max(rev.progress if rev.status == "running" else 0.0,
                       _progress(PlanSpec.load(plan.request), stage, local))
        if stage != rev.stage:
            stage_events.record(s, plan.id, f"rev{rev.number}:{rev.stage}", f"rev{rev.number}:{stage}",
                                status=plan.status, progress=progress, message=f"revision {rev.number}: {stage}")
        rev.status, rev.stage, rev.progress, rev.updated_at = "running", stage, progress, utcnow()
        notify.changed(s, "plan", rev.plan_id)


def stage_repair(revision_id: str) -> dict:
    """Re-patch the plan's arcs that sit on faulty ports onto spare ports (when requested and bound). The
    state counts the worker's CPU seconds stage by stage (`cpu_s`: the stages may run in different processes)."""
    c0 = _cpu()
    state = {"repair": _repair(revision_id)}
    return {**state, "cpu_s": _cpu() - c0}


def _repair(revision_id: str) -> dict:
    _advance(revision_id, "repair", 0.0)
    with session_scope(_url()) as s:
        rev = _claim(s, revision_id)
        if not rev.repair:
            return {"status": "not_requested"}
        b = s.get(PlanBinding, rev.plan_id)
        if b is None or b.released:
            return {"status": "unavailable", "reason": "the plan is not bound to a fabric" if b is None
                    else "the plan released its hosts"}
        fabrics._lock(s, b.fabric_id)
        state = fabrics.load_state(s, b.fabric_id)
        faults = [(f.panel_id, f.side, f.port) for f in s.scalars(
            select(PortFault).join(PanelRow, PanelRow.id == PortFault.panel_id).where(PanelRow.fabric_id == b.fabric_id))]
        side = b.assignment.get("side", 0)
        try:
            r = repatch(state.fabric.side(side), state.assignment(rev.plan_id), faults)
        except RepairError as exc:
            return {"status": "impossible", "reason": str(exc)}
        if not r.moves:
            return {"status": "none_needed"}
        versions = fabrics.replace_assignment(s, rev.plan_id, r.assignment,
                                              _repatched(rev.number, [f"{m['tail']}>{m['head']}" for m in r.moves]))
        estimate = fabrics.ready_estimate_s(s, b)
        rep = Repair(plan_id=rev.plan_id, revision_number=rev.number, status="pending",
                     panels={p: versions[p] for p in r.panels if p in versions}, moves=r.moves,
                     ready_estimate_s=estimate)
        s.add(rep)
        s.flush()
        return {"status": "pending", "id": rep.id, "panels": rep.panels, "moves": r.moves,
                "ready_estimate_s": estimate}


def _repatched(number: int, arcs: list[str], limit: int = 200) -> str:
    """A repair's reason naming every re-patched arc (as many as the panel config's reason holds, then how
    many more)."""
    head = f"revision {number}: {len(arcs)} failed link(s) re-patched: "
    if len(head + ", ".join(arcs)) <= limit:
        return head + ", ".join(arcs)
    for k in range(len(arcs) - 1, -1, -1):
        text = head + ", ".join(arcs[:k]) + f" and {len(arcs) - k} more"
        if len(text) <= limit:
            return text
    return head[:limit]


def _progress(spec: PlanSpec, stage: str, local: float) -> float:
    return revision_progress(spec, stage, local, has_alltoall(spec))


def mean_size(spec: PlanSpec) -> float:
    """The workload's weighted mean message size: on uniform links a schedule's workload time is
    W (steps alpha + tau Mbar / B), so the faster schedule at Mbar is the faster for the whole workload."""
    items = workload_items(spec)
    total = sum(i.weight for i in items)
    if total > 0:
        return sum(i.size_bytes * i.weight for i in items) / total
    return sum(i.size_bytes for i in items) / len(items)


def stage_schedules(state: dict, revision_id: str) -> dict:
    """The degraded topology's verified AG/RS/AR schedules (and all-to-all), stored under the revision's artifact
    prefix."""
    if state.get("stop"):
        return state
    c0 = _cpu()
    _advance(revision_id, "schedule", 0.0)
    with session_scope(_url()) as s:
        rev = _claim(s, revision_id)
        plan = s.get(Plan, rev.plan_id)
        spec = PlanSpec.load(plan.request)
        expr, failed, number = plan.result["topology"]["expr"], list(rev.failed), rev.number
    t0 = time.perf_counter()
    link = spec.link
    # BFB's receivers split over the cores: a job process (embedded: a daemonic process; Celery: a pool child)
    # may not start a pool, so they are solved in forked children (bfb.lp.forked_blocks: N = 1024, 1.1 CPU s
    # per orientation on two cores); a vertex-transitive plan's revision solves only the receivers the failure
    # changed
    original = build(expr)
    out = degraded_schedules(original, [tuple(f) for f in failed], link, mean_size(spec),
                             bfb_options={"workers": default_workers()})
    g = out.topology
    sets = size_sets.revision_sets(out, original if original.translation is not None else None)
    a2a_sizes = alltoall_sizes(spec)
    alltoall = a2a_blobs = None
    if a2a_sizes:
        _advance(revision_id, "alltoall", 0.0)
        alltoall, a2a_blobs = _alltoall(g, link, a2a_sizes)
    _advance(revision_id, "verify", 0.0)
    summaries, blobs = {}, {}
    encode = size_sets.encoder()            # the sets' ranges are mostly the served schedules: encoded once
    for c, cmp in out.comparisons.items():
        chosen = cmp.chosen
        if not chosen.verified:             # choose() serves only a schedule that passed; never store another
            raise RuntimeError(f"the {c.value} schedule of {g.expr} is not verified")
        blobs[c.value] = (encode(chosen.schedule), link_loads_blob(chosen.schedule, g, chosen.tau))
        summaries[c.value] = {"steps": chosen.steps, "tau": float(chosen.tau), "tau_exact": str(chosen.tau),
                              "verified": True, "transfers": chosen.schedule.transfers, "scheduler": chosen.scheduler,
                              "candidates": [x.as_dict() for x in cmp.candidates]}
    seconds = time.perf_counter() - t0
    prefix = f"rev{number}:"
    with session_scope(_url()) as s:
        _claim(s, revision_id)
        for c, (sched, loads) in blobs.items():
            digest = repo.put_blob(s, sched, "schedule", "application/x-npz", compress=False)
            repo.attach(s, rev.plan_id, f"{prefix}schedule:{c}", digest, summaries[c])
            summaries[c]["digest"] = digest
            repo.attach(s, rev.plan_id, f"{prefix}loads:{c}",
                        repo.put_blob(s, loads, "link-loads", "application/x-npz", compress=False))
        if a2a_blobs is not None:
            sched, loads, summary = a2a_blobs
            digest = repo.put_blob(s, sched, "schedule", "application/x-npz", compress=False)
            repo.attach(s, rev.plan_id, f"{prefix}schedule:alltoall", digest, summary)
            repo.attach(s, rev.plan_id, f"{prefix}loads:alltoall",
                        repo.put_blob(s, loads, "link-loads", "application/x-npz", compress=False))
            summaries["alltoall"] = {**summary, "digest": digest}
        for c, rows in size_sets.store_sets(s, rev.plan_id, prefix, sets, encode).items():
            summaries[c]["by_size"] = rows
        meta = {"nodes": g.nodes, "degree": g.degree}
        topology_doc = topology_json(g)
        topo_digest = repo.put_blob(s, json.dumps(topology_doc).encode(), "topology", "application/json")
        repo.attach(s, rev.plan_id, f"{prefix}topology", topo_digest, meta)
        repo.attach(s, rev.plan_id, f"{prefix}topology:graphml",
                    repo.put_blob(s, topology_graphml(g, topology_doc), "topology", "application/graphml+xml"), meta)
    topology = {"expr": g.expr, "nodes": g.nodes, "degree": g.degree, "regular": g.regular,
                "removed": [[int(x) for x in f] for f in failed], **topology_facts(g)}
    return {**state, "schedules": summaries, "topology": topology, "topology_digest": topo_digest,
            "alltoall": alltoall, "artifact_prefix": prefix, "seconds": seconds,
            "cpu_s": state.get("cpu_s", 0.0) + _cpu() - c0}


def _alltoall(g, link: LinkModel, sizes: list[int]) -> tuple[dict, tuple | None]:
    """(the revision's `alltoall` result, (schedule npz, loads npz, artifact summary) or None) on the degraded
    topology g: the verified schedule, or the throughput bracket when it is beyond the library's limits,
    or a refusal (the task's time or memory limit) recorded with its reason."""
    try:
        built, report = build_checked(g, alltoall_schedule)
    except AllToAllRefused as exc:
        if exc.limit != "size":
            return {"status": "refused", "reason": exc.reason, "expr": g.expr}, None
        try:
            return bracket_result(g, link, sizes, f"no all-to-all schedule: {exc.reason}"), None
        except SoftTimeLimitExceeded:
            return {"status": "refused", "expr": g.expr, "reason": f"{exc.reason}; its throughput bracket exceeded "
                    f"the worker's time limit of {get_settings().task_time_limit_s} s"}, None
    result, summary = built_result(built, report, link, sizes)
    return result, (built.schedule.to_bytes(), link_loads_blob(built.schedule, g, report.tau), summary)


def stage_compile(state: dict, revision_id: str) -> dict:
    """The revision's XML: the plan's compile stage (services.jobs.stages.compile_stage) on the revision's
    schedules, for the runtimes the plan lists; refusals are reported, not failures."""
    if state.get("stop"):
        return state
    with session_scope(_url()) as s:
        plan_id = _claim(s, revision_id).plan_id

    def advance(_plan_id: str, stage: str, progress: float, message: str | None = None) -> None:
        _advance(revision_id, stage, (progress - 0.96) / 0.03)

    c0, t0 = _cpu(), time.perf_counter()
    out = compile_stage.stage_compile(state, plan_id, advance, prefix=state["artifact_prefix"])
    return {**out, "compile_s": time.perf_counter() - t0, "cpu_s": out.get("cpu_s", 0.0) + _cpu() - c0}


def stage_finish(state: dict, revision_id: str) -> dict:
    """Predicted times and the failure's cost; the revision done (atomically with its result)."""
    if state.get("stop"):
        return state
    c0 = _cpu()
    with session_scope(_url()) as s:
        rev = _claim(s, revision_id)
        plan = s.get(Plan, rev.plan_id)
        spec = PlanSpec.load(plan.request)
        predicted = predicted_times(spec, state["schedules"])
        original = plan.result["predicted_time_us"]
        result = {"topology": state["topology"], "schedules": state["schedules"], "predicted_time_us": predicted,
                  "barrier_time_us": barrier_times(spec, state["schedules"]),
                  "workload_time_us": workload_us(spec, predicted), "alltoall": state.get("alltoall"),
                  "failure_cost": failure_cost(spec, original, predicted, 0, plan.result.get("alltoall"),
                                               state.get("alltoall"),
                                               training_cost(spec, plan.result.get("training"),
                                                             state["topology"]["expr"], state["schedules"],
                                                             state.get("alltoall"))),
                  "repair": state.get("repair"), "artifact_prefix": state["artifact_prefix"],
                  "compiled": state.get("compiled"),
                  "seconds": state.get("seconds"), "compile_s": state.get("compile_s"),
                  "cpu_s": state.get("cpu_s", 0.0) + _cpu() - c0}
        stage_events.close_stage(s, plan.id, f"rev{rev.number}:{rev.stage}", status=plan.status, progress=1.0)
        rev.status, rev.stage, rev.progress, rev.result, rev.reason = "done", "done", 1.0, result, None
        rev.updated_at = rev.heartbeat_at = utcnow()
        job_metrics.job_ended(s, "revision", "done", rev.created_at, rev.updated_at)
        slow = result["failure_cost"]["workload_us"]["slowdown"]
        s.add(PlanEvent(plan_id=plan.id, status=plan.status, stage="revision", progress=plan.progress,
                        message=f"revision {rev.number} done: {state['topology']['expr']}"
                                + (f", workload {slow:.3f}x the original" if slow else "")))
        notify.changed(s, "plan", plan.id)
    return {"done": True}
