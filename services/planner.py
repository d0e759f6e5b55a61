"""The plan pipeline's stages (DESIGN 4.2): frontier -> selection -> schedules -> verification -> artifacts.
A training workload's selection is services.training_plans, a plan's all-to-all schedule services.alltoall_plans
and the compile stage services.compiling.

Each stage is a plain function over the database (services.store) and the synthesis library; Celery tasks
(workers.tasks) call them. Stages are idempotent: a redelivered task repeats its stage harmlessly, artifacts
are content-addressed, and a finished plan is never changed again. A task runs for one delivery attempt of
its plan (`attempt_of`); every write first claims the plan row for that attempt (services.store.jobs.claim),
so a task whose plan finished, failed or was delivered again stops (`Superseded`) instead of writing.
"""
from __future__ import annotations

import io
import json
import time
from contextlib import contextmanager
from contextvars import ContextVar

import networkx as nx
import numpy as np

from . import workloads
from .config import get_settings
from .store import jobs, repo
from .store.db import session_scope
from services.synthesis.bfb.lp import BfbContext, BlockResult, merge_blocks, receiver_blocks, solve_block
from services.synthesis.topology.catalog import build
from services.synthesis.search.construct import construct_collectives, needs_bfb_fanout
from services.synthesis.schedule.cost import LinkModel, link_loads
from services.synthesis.search.finder import (WorkloadItem, baseline_times, candidate_from_entry, frontier,
                                              frontier_entry, select)
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective, Schedule, allreduce
from services.synthesis.schedule.verify import verify
from fractions import Fraction


class PlanInputError(ValueError):
    """The request cannot be planned (the reason is shown to the user)."""


class Superseded(Exception):
    """The job finished, failed or was delivered again: this task must not write to it."""


_ATTEMPT: ContextVar[int | None] = ContextVar("fabricplan_attempt", default=None)


@contextmanager
def attempt_of(attempt: int | None):
    """Run the enclosed stage as delivery `attempt` of its job (None: unguarded, a direct call)."""
    token = _ATTEMPT.set(attempt)
    try:
        yield
    finally:
        _ATTEMPT.reset(token)


def current_attempt() -> int | None:
    return _ATTEMPT.get()


def claim(s, plan_id: str, kind: str = "plan") -> None:
    """Hold the job's row for this attempt in the transaction of `s`, or raise Superseded."""
    if not jobs.claim(s, kind, plan_id, _ATTEMPT.get()):
        raise Superseded(f"{kind} {plan_id} is finished or another delivery runs it")


def _url() -> str:
    return get_settings().sqlalchemy_url


def _request(plan_id: str) -> dict:
    with session_scope(_url()) as s:
        plan = repo.get_plan(s, plan_id)
        if plan is None:
            raise PlanInputError(f"plan {plan_id} does not exist")
        return dict(plan.request)


def _advance(plan_id: str, stage: str, progress: float, message: str | None = None) -> None:
    with session_scope(_url()) as s:
        if not repo.advance(s, plan_id, stage=stage, progress=progress, message=message, attempt=_ATTEMPT.get()):
            raise Superseded(f"plan {plan_id} is finished or another delivery runs it")


advance_stage = _advance       # for stages defined outside this module (services.compiling, ...)
plan_request = _request


# ----- frontier (cached per N, d, options) -------------------------------------------------------------
def frontier_entries(nodes: int, degree: int, bidirectional: bool,
                     collective: str = "allgather") -> tuple[list[dict], bool]:
    """(entries, from_cache): the frontier on the collective's exact costs (`frontier_entry`)."""
    coll = Collective.parse(collective)
    options = f"bidirectional={str(bool(bidirectional)).lower()};collective={coll.value}"
    with session_scope(_url()) as s:
        hit = repo.cached_frontier(s, nodes, degree, options)
        if hit is not None:
            return list(hit.entries), True
    t0 = time.perf_counter()
    entries = [frontier_entry(c, coll) for c in frontier(nodes, degree, bidirectional=bidirectional, collective=coll)]
    with session_scope(_url()) as s:
        repo.store_frontier(s, nodes, degree, options, entries, time.perf_counter() - t0)
    return entries, False


def stage_frontier(plan_id: str) -> dict:
    """The frontier of every collective kind in the workload (their union when there are several: each entry
    carries all three collectives' costs, so selection prices a mixed workload exactly)."""
    req = _request(plan_id)
    _advance(plan_id, "frontier", 0.05, "searching the Pareto frontier")
    entries, cached, seen = [], True, set()
    for kind in dict.fromkeys(i.collective.value for i in workload_items(req)):
        part, hit = frontier_entries(req["nodes"], req["degree"], req.get("bidirectional_only", False), kind)
        cached = cached and hit
        for e in part:
            if e["expr"] not in seen:
                seen.add(e["expr"])
                entries.append(e)
    _advance(plan_id, "frontier", 0.2, f"{len(entries)} Pareto-efficient topologies" + (" (cached)" if cached else ""))
    return {"frontier": entries}


# ----- selection ------------------------------------------------------------------------------------
def workload_items(req: dict) -> list[WorkloadItem]:
    """The workload's collectives of the allreduce family with their sizes and weights: the sizes form's, or
    a training job's DDP allreduces (one per bucket capacity, services.workloads.message_sizes)."""
    w = req["workload"]
    if workloads.is_training(req):
        return [WorkloadItem(Collective.ALLREDUCE, float(b), 1.0) for b in workloads.message_sizes(req)]
    kinds = w.get("collectives") or [w.get("collective", "allreduce")]
    weights = w.get("weights") or [1.0] * len(w["sizes_bytes"])
    return [WorkloadItem(Collective.parse(k), float(sz), float(wt))
            for k in kinds for sz, wt in zip(w["sizes_bytes"], weights)]


def stage_select(state: dict, plan_id: str) -> dict:
    if state.get("stop"):
        return state
    req = _request(plan_id)
    if workloads.is_training(req):
        from . import training_plans

        return training_plans.stage_select(state, plan_id, req, _advance)
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    items = workload_items(req)
    cands = [candidate_from_entry(e) for e in state["frontier"]]
    w = req["workload"]
    a2a_weight, a2a_bytes = w.get("alltoall_weight") or 0.0, w.get("alltoall_bytes") or 0
    if a2a_weight:
        from services.synthesis.evaluate.alltoall import alltoall_throughput

        _advance(plan_id, "select", 0.25, "all-to-all throughput of every frontier entry (MCF)")
        for e in state["frontier"]:
            e.setdefault("alltoall_f", alltoall_throughput(build(e["expr"])).throughput)
    f_of = {e["expr"]: e.get("alltoall_f") for e in state["frontier"]}
    sel = select(cands, link, items, alltoall_bytes=a2a_bytes, alltoall_weight=a2a_weight,
                 alltoall_f=lambda c: f_of[c.expr])
    times = {c.expr: t for c, t in sel.times_s}
    for e in state["frontier"]:
        e["workload_time_us"] = times[e["expr"]] * 1e6
    best = next(e for e in state["frontier"] if e["expr"] == sel.best.expr)
    _advance(plan_id, "select", 0.3, f"selected {best['expr']}")
    return {**state, "selected": best}


# ----- fabric binding -----------------------------------------------------------------------------
def stage_fabric(state: dict, plan_id: str) -> dict:
    """When the request names a fabric: reserve its hosts, assign ports, publish new panel configs."""
    if state.get("stop"):
        return state
    req = _request(plan_id)
    if not req.get("fabric_id"):
        return state
    from services.fabric import FabricError
    from sqlalchemy.exc import IntegrityError

    from .store import fabrics

    _advance(plan_id, "fabric", 0.35, f"reserving hosts on {req['fabric_id']}")
    topo = build(state["selected"]["expr"])
    try:
        with session_scope(_url()) as s:
            claim(s, plan_id)
            b = fabrics.bind_plan(s, plan_id, req["fabric_id"], topo, req.get("hosts"), bool(req.get("lookahead")))
            summary = {"fabric_id": b.fabric_id, "hosts": b.assignment["hosts"], "panels": b.required_versions,
                       **fabrics.binding_facts(s, b, req["bandwidth_gbps"] / topo.degree)}
    except IntegrityError:
        raise PlanInputError("another plan reserved one of these hosts at the same time; submit again") from None
    except FabricError as exc:
        raise PlanInputError(str(exc)) from None
    return {**state, "fabric": summary}


# ----- schedules ------------------------------------------------------------------------------------
def fanout_plan(state: dict, plan_id: str) -> list[tuple[bool, list[int]]] | None:
    """Receiver blocks (orientation, receivers) when the selected schedule is one large BFB solve."""
    if state.get("stop"):
        return None
    expr = state["selected"]["expr"]
    st = get_settings()
    if not needs_bfb_fanout(expr, st.bfb_fanout_min_nodes):
        return None
    topo = build(expr)
    orientations = [False] if topo.bidirectional else [False, True]
    return [(o, b.tolist()) for o in orientations for b in receiver_blocks(topo.nodes, st.bfb_fanout_blocks)]


def _oriented(expr: str, transposed: bool):
    t = build(expr)
    return t.transpose() if transposed else t


def stage_bfb_block(plan_id: str, expr: str, transposed: bool, receivers: list[int]) -> str:
    """One receiver block of LP (1): solved, stored as a blob, its digest returned (the group member)."""
    ctx = BfbContext.create(_oriented(expr, transposed), shortcut=False)
    res = solve_block(ctx, np.asarray(receivers))
    buf = io.BytesIO()
    np.savez(buf, receivers=res.receivers, step=res.step, source=res.source, arc=res.arc, lo=res.lo, hi=res.hi,
             den=res.den, u_num=res.u_num, u_den=res.u_den, transposed=np.array([transposed]))
    with session_scope(_url()) as s:
        claim(s, plan_id)
        digest = repo.put_blob(s, buf.getvalue(), "bfb-block", "application/x-npz")
        plan = repo.get_plan(s, plan_id)
        repo.advance(s, plan_id, stage="schedule", progress=min(0.75, plan.progress + 0.4 / 16),
                     message=f"solved receivers {receivers[0]}..{receivers[-1]}"
                             + (" of the transpose" if transposed else ""), attempt=_ATTEMPT.get())
    return digest


def _load_block(digest: str) -> tuple[bool, BlockResult]:
    with session_scope(_url()) as s:
        data, _ = repo.get_blob(s, digest)
    z = np.load(io.BytesIO(data))
    fields = {k: z[k] for k in ("receivers", "step", "source", "arc", "lo", "hi", "den", "u_num", "u_den")}
    return bool(z["transposed"][0]), BlockResult(**fields)


def stage_schedules(state: dict, plan_id: str, block_digests: list[str] | None = None) -> dict:
    """Build (or merge the fanned-out blocks into) allgather, reduce-scatter and allreduce schedules,
    model-check every one, and store them as artifacts."""
    if state.get("stop"):
        return state
    expr = state["selected"]["expr"]
    _advance(plan_id, "schedule", 0.75 if block_digests else 0.4, "building schedules")
    topo = build(expr)
    if block_digests:
        blocks = {False: [], True: []}
        for d in block_digests:
            o, b = _load_block(d)
            blocks[o].append(b)
        ag = merge_blocks(BfbContext.create(topo, shortcut=False), blocks[False]).schedule
        if blocks[True]:
            rs = merge_blocks(BfbContext.create(topo.transpose(), shortcut=False), blocks[True]).schedule
            rs = rs.reverse(topology=topo.expr)
        else:
            rs = ag.reverse(topology=topo.expr)
        schedules = {Collective.ALLGATHER: ag, Collective.REDUCESCATTER: rs,
                     Collective.ALLREDUCE: allreduce(rs, ag)}
    else:
        schedules = {c: b.schedule for c, b in construct_collectives(expr).items()}
    _advance(plan_id, "verify", 0.85, "model-checking the schedules")
    summaries, loads = {}, {}
    for c, sched in schedules.items():
        report = verify(sched, topo)
        if not report.ok:
            raise RuntimeError(f"the {c.value} schedule of {expr} failed model checking: {report.violation.message}")
        promised = state["selected"].get("costs", {}).get(c.value)
        if promised and (report.steps, report.tau) != (promised["steps"], Fraction(promised["tau_exact"])):
            raise RuntimeError(f"the {c.value} schedule of {expr} costs {report.steps} steps, tau {report.tau}; "
                               f"the frontier priced it at {promised['steps']} steps, tau {promised['tau_exact']}")
        loads[c] = link_loads_blob(sched, topo, report.tau)
        summaries[c.value] = {"steps": report.steps, "tau": float(report.tau), "tau_exact": str(report.tau),
                              "verified": True, "transfers": report.transfers}
    _advance(plan_id, "store", 0.95, "storing artifacts")
    # the blobs are content-addressed (a redelivery writes the same ones): stored first, in their own
    # transaction, so the plan's row is held only while they are attached and the heartbeat is never kept out
    topology_blob, graphml_blob = json.dumps(topology_json(topo)).encode(), topology_graphml(topo)
    with session_scope(_url()) as s:
        digests = {c: (repo.put_blob(s, sched.to_bytes(), "schedule", "application/x-npz", compress=False),
                       repo.put_blob(s, loads[c], "link-loads", "application/x-npz", compress=False))
                   for c, sched in schedules.items()}
        digest = repo.put_blob(s, topology_blob, "topology", "application/json")
        graphml = repo.put_blob(s, graphml_blob, "topology", "application/graphml+xml")
    with session_scope(_url()) as s:
        claim(s, plan_id)
        for c, (schedule_digest, loads_digest) in digests.items():
            repo.attach(s, plan_id, f"schedule:{c.value}", schedule_digest, summaries[c.value])
            summaries[c.value]["digest"] = schedule_digest
            repo.attach(s, plan_id, f"loads:{c.value}", loads_digest)
        repo.attach(s, plan_id, "topology", digest, {"nodes": topo.nodes, "degree": topo.degree})
        repo.attach(s, plan_id, "topology:graphml", graphml, {"nodes": topo.nodes, "degree": topo.degree})
    return {**state, "schedules": summaries, "topology_digest": digest,
            "topology_facts": topology_facts(topo)}


def stage_finish(state: dict, plan_id: str) -> dict:
    if state.get("stop"):
        return state
    req = _request(plan_id)
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    sel = state["selected"]
    predicted = {}
    for size in workloads.message_sizes(req):
        for c in ALLGATHER_FAMILY:
            sch = state["schedules"][c.value]
            predicted.setdefault(c.value, {})[str(size)] = link.time(sch["steps"], Fraction(sch["tau_exact"]), size) * 1e6
    ag = {**sel, **frontier_entry(candidate_from_entry(sel), Collective.ALLGATHER)}   # the allgather's T_L, T_B
    result = {
        "topology": {**ag, **state["topology_facts"],
                     "t_l_us": ag["steps"] * req["alpha_us"],
                     "t_b_us_per_mib": float(Fraction(ag["tau_exact"])) * (1 << 20) / link.node_bandwidth_Bps * 1e6},
        "frontier": state["frontier"],
        "schedules": state["schedules"],
        "predicted_time_us": predicted,
        "workload_time_us": sel.get("workload_time_us"),
        "fabric": state.get("fabric"),
        "compiled": state.get("compiled"),
        "baselines_time_us": _baselines_time_us(state, req, link),
        "training": state.get("training"),
        "alltoall": state.get("alltoall"),
    }
    with session_scope(_url()) as s:
        if not repo.finish(s, plan_id, result, attempt=_ATTEMPT.get()):
            raise Superseded(f"plan {plan_id} is finished or another delivery runs it")
    return {"done": True}


def _baselines_time_us(state: dict, req: dict, link: LinkModel) -> dict[str, float]:
    """The workload on today's topologies: a training job's iteration times (simulated at select), or the
    sizes form's workload time."""
    if state.get("training"):
        from .training_plans import baselines_time_us

        return baselines_time_us(state["training"])
    w = req["workload"]
    return {k: v * 1e6 for k, v in baseline_times(req["nodes"], req["degree"], link, workload_items(req),
                                                  w.get("alltoall_bytes") or 0.0,
                                                  w.get("alltoall_weight") or 0.0).items()}


def fail_plan(plan_id: str, reason: str, attempt: int | None = None, url: str | None = None) -> bool:
    """Fail the plan with the reason (only while it runs `attempt`, by default this task's) and release
    whatever it reserved on a fabric."""
    from .store import fabrics

    with session_scope(url or _url()) as s:
        failed = repo.fail(s, plan_id, reason, attempt=_ATTEMPT.get() if attempt is None else attempt)
        if failed:
            fabrics.release_plan(s, plan_id)
        return failed


def fail_job(kind: str, job_id: str, reason: str, attempt: int | None = None, url: str | None = None) -> bool:
    """Fail a plan, an evaluation, a plan revision or a compile job with the reason (see fail_plan)."""
    if kind == "plan":
        return fail_plan(job_id, reason, attempt, url)
    if kind == "compile":
        from . import compiling

        return compiling.fail(job_id, reason, _ATTEMPT.get() if attempt is None else attempt, url)
    if kind == "revision":
        from . import revisions

        return revisions.fail(job_id, reason, _ATTEMPT.get() if attempt is None else attempt, url)
    from . import evaluation

    return evaluation.fail(job_id, reason, _ATTEMPT.get() if attempt is None else attempt, url)


def job_stage(kind: str, job_id: str, url: str | None = None) -> str:
    """The stage a plan or an evaluation is in (for failure reasons)."""
    with session_scope(url or _url()) as s:
        job = s.get(jobs.KINDS[kind], job_id)
        return job.stage if job is not None else "unknown"


def topology_json(t) -> dict:
    """The topology artifact: arcs [tail, head, lane] in arc order, and `permutation`: for each arc, which
    of the d permutations of a Konig split (services.fabric.konig_split) it belongs to - the panel plane
    (host port) it takes in the planes cabling, and the colour the dashboard draws it in (regular topologies
    only)."""
    from services.fabric import konig_split

    out = {"expr": t.expr, "nodes": t.nodes, "degree": t.degree, "bidirectional": t.bidirectional,
           "arcs": [[int(a), int(b), int(l)] for a, b, l in zip(t.tails, t.heads, t.lanes)]}
    if t.regular:                   # an irregular graph (arcs removed) has no split into d permutations
        out["permutation"] = arc_permutations(t, konig_split(t.nodes, t.tails, t.heads)).tolist()
    return out


def arc_permutations(t, slots: np.ndarray) -> np.ndarray:
    """Per arc, the index of the permutation (row of `slots`, shape (d, N) of arc indices) that uses it."""
    perm = np.empty(t.arcs, dtype=np.int64)
    perm[slots] = np.arange(slots.shape[0])[:, None]
    return perm


def topology_facts(t) -> dict:
    """What the plan reports about its topology besides the expression's costs: diameter, duplex cabling,
    and the distance distribution (ordered node pairs at each distance 1..D, and their mean)."""
    counts = t.distance_counts
    pairs = int(counts.sum())
    return {"diameter": t.diameter, "bidirectional": t.bidirectional,
            "distance_counts": counts[1:].tolist(),
            "mean_distance": float((np.arange(counts.size) * counts).sum() / pairs) if pairs else 0.0}


def link_loads_blob(sched: Schedule, t, tau: Fraction) -> bytes:
    """The schedule's per-step link loads (services.synthesis.schedule.cost.link_loads) as one npz blob,
    stored beside the schedule so the dashboard's heat map costs a blob read, not a pass over the schedule.
    The loads must give back `tau`, the model checker's measurement, before they are stored."""
    loads = link_loads(sched, t)
    shards = 1 if sched.collective is Collective.ALLTOALL else sched.nodes     # cost.measured_tau's unit
    if Fraction(t.degree * int(loads.max(axis=1, initial=0).sum()), shards * sched.grid) != tau:
        raise RuntimeError(f"link loads of the {sched.collective.value} schedule disagree with its measured tau")
    small = loads.astype(np.min_scalar_type(int(loads.max(initial=0))))
    buf = io.BytesIO()
    np.savez_compressed(buf, loads=small, grid=np.array([sched.grid]), nodes=np.array([sched.nodes]))
    return buf.getvalue()


def topology_graphml(t) -> bytes:
    g = nx.MultiDiGraph(expr=t.expr, degree=t.degree)
    g.add_nodes_from(range(t.nodes))
    for a, b, l in zip(t.tails.tolist(), t.heads.tolist(), t.lanes.tolist()):
        g.add_edge(a, b, key=l, lane=l)
    buf = io.BytesIO()
    nx.write_graphml(g, buf)
    return buf.getvalue()
