"""The plan pipeline's stages (DESIGN 4.2): frontier -> selection -> schedules -> verification -> artifacts.

Each stage is a plain function over the database (services.store) and the synthesis library; Celery tasks
(workers.tasks) call them. Stages are idempotent: a redelivered task repeats its stage harmlessly, artifacts
are content-addressed, and a finished plan is never changed again.
"""
from __future__ import annotations

import io
import json
import time

import networkx as nx
import numpy as np

from .config import get_settings
from .store import repo
from .store.db import session_scope
from services.synthesis.bfb.lp import BfbContext, BlockResult, merge_blocks, receiver_blocks, solve_block
from services.synthesis.topology.catalog import build
from services.synthesis.search.construct import construct_collectives, needs_bfb_fanout
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.search.finder import (WorkloadItem, baseline_times, candidate_from_entry, frontier,
                                              frontier_entry, select)
from services.synthesis.schedule.ir import Collective, allreduce
from services.synthesis.schedule.verify import verify
from fractions import Fraction


class PlanInputError(ValueError):
    """The request cannot be planned (the reason is shown to the user)."""


def _url() -> str:
    return get_settings().sqlalchemy_url


def _request(plan_id: str) -> dict:
    with session_scope(_url()) as s:
        plan = repo.get_plan(s, plan_id)
        if plan is None:
            raise PlanInputError(f"plan {plan_id} does not exist")
        return dict(plan.request)


def _advance(plan_id: str, stage: str, progress: float, message: str | None = None) -> bool:
    with session_scope(_url()) as s:
        return repo.advance(s, plan_id, stage=stage, progress=progress, message=message)


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
    with session_scope(_url()) as s:
        repo.start_attempt(s, plan_id)
    if not _advance(plan_id, "frontier", 0.05, "searching the Pareto frontier"):
        return {"stop": True}
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
    w = req["workload"]
    kinds = w.get("collectives") or [w.get("collective", "allreduce")]
    weights = w.get("weights") or [1.0] * len(w["sizes_bytes"])
    return [WorkloadItem(Collective.parse(k), float(sz), float(wt))
            for k in kinds for sz, wt in zip(w["sizes_bytes"], weights)]


def stage_select(state: dict, plan_id: str) -> dict:
    if state.get("stop"):
        return state
    req = _request(plan_id)
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
            b = fabrics.bind_plan(s, plan_id, req["fabric_id"], topo, req.get("hosts"))
            summary = {"fabric_id": b.fabric_id, "hosts": b.assignment["hosts"], "panels": b.required_versions}
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
        digest = repo.put_blob(s, buf.getvalue(), "bfb-block", "application/x-npz")
        plan = repo.get_plan(s, plan_id)
        if plan is not None and plan.status == "running":
            repo.advance(s, plan_id, stage="schedule", progress=min(0.75, plan.progress + 0.4 / 16),
                         message=f"solved receivers {receivers[0]}..{receivers[-1]}"
                                 + (" of the transpose" if transposed else ""))
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
    summaries = {}
    for c, sched in schedules.items():
        report = verify(sched, topo)
        if not report.ok:
            raise RuntimeError(f"the {c.value} schedule of {expr} failed model checking: {report.violation.message}")
        promised = state["selected"].get("costs", {}).get(c.value)
        if promised and (report.steps, report.tau) != (promised["steps"], Fraction(promised["tau_exact"])):
            raise RuntimeError(f"the {c.value} schedule of {expr} costs {report.steps} steps, tau {report.tau}; "
                               f"the frontier priced it at {promised['steps']} steps, tau {promised['tau_exact']}")
        summaries[c.value] = {"steps": report.steps, "tau": float(report.tau), "tau_exact": str(report.tau),
                              "verified": True, "transfers": report.transfers}
    _advance(plan_id, "store", 0.95, "storing artifacts")
    with session_scope(_url()) as s:
        for c, sched in schedules.items():
            digest = repo.put_blob(s, sched.to_bytes(), "schedule", "application/x-npz", compress=False)
            repo.attach(s, plan_id, f"schedule:{c.value}", digest, summaries[c.value])
            summaries[c.value]["digest"] = digest
        digest = repo.put_blob(s, json.dumps(topology_json(topo)).encode(), "topology", "application/json")
        repo.attach(s, plan_id, "topology", digest, {"nodes": topo.nodes, "degree": topo.degree})
    return {**state, "schedules": summaries, "topology_digest": digest,
            "topology_facts": {"diameter": topo.diameter, "bidirectional": topo.bidirectional}}


def stage_finish(state: dict, plan_id: str) -> dict:
    if state.get("stop"):
        return state
    req = _request(plan_id)
    link = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    sel = state["selected"]
    predicted = {}
    for size in req["workload"]["sizes_bytes"]:
        for c in Collective:
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
        "baselines_time_us": {k: v * 1e6 for k, v in baseline_times(
            req["nodes"], req["degree"], link, workload_items(req), req["workload"].get("alltoall_bytes") or 0.0,
            req["workload"].get("alltoall_weight") or 0.0).items()},
    }
    with session_scope(_url()) as s:
        repo.finish(s, plan_id, result)
    return {"done": True}


def current_stage(plan_id: str) -> str:
    with session_scope(_url()) as s:
        plan = repo.get_plan(s, plan_id)
        return plan.stage if plan else "unknown"


def fail_plan(plan_id: str, reason: str) -> None:
    """Fail the plan with the reason and release whatever it reserved on a fabric."""
    from .store import fabrics

    with session_scope(_url()) as s:
        if repo.fail(s, plan_id, reason):
            fabrics.release_plan(s, plan_id)


def topology_json(t) -> dict:
    return {"expr": t.expr, "nodes": t.nodes, "degree": t.degree, "bidirectional": t.bidirectional,
            "arcs": [[int(a), int(b), int(l)] for a, b, l in zip(t.tails, t.heads, t.lanes)]}


def topology_graphml(t) -> bytes:
    g = nx.MultiDiGraph(expr=t.expr, degree=t.degree)
    g.add_nodes_from(range(t.nodes))
    for a, b, l in zip(t.tails.tolist(), t.heads.tolist(), t.lanes.tolist()):
        g.add_edge(a, b, key=l, lane=l)
    buf = io.BytesIO()
    nx.write_graphml(g, buf)
    return buf.getvalue()
