"""The plan's schedules stage (DESIGN 4.2): the selected topology's allgather, reduce-scatter and allreduce
schedules (one BFB solve, or receiver blocks solved in parallel tasks and merged), each model-checked against
the cost the frontier priced it at and stored with its link loads and the topology (services.jobs.stages.artifacts).
Embedded, the main XML files start compiling from the schedules once they are built, while they are checked
and stored (services.jobs.stages.early_compile); a schedule that fails stops them.
The all-to-all schedule is the next stage (alltoall).
"""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np

from services.synthesis.bfb.lp import BfbContext, BlockResult, merge_blocks, receiver_blocks, solve_block
from services.synthesis.schedule.ir import Collective, allreduce
from services.synthesis.schedule.verify import verify, verify_allreduce_phases
from services.synthesis.search.construct import construct_collectives, needs_bfb_fanout
from services.synthesis.topology.catalog import build

from services.config import get_settings
from services.store import repo
from services.store.db import session_scope
from services.jobs.stages.artifacts import (block_from_npz, block_npz, link_loads_blob, topology_facts,
                                            topology_graphml, topology_json)
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.stages import early_compile, size_sets
from services.jobs.stages.attempts import advance, claim, current_attempt, plan_spec, weighted

__all__ = ["fanout_plan", "stage_bfb_block", "stage_schedules"]


def _url() -> str:
    return get_settings().sqlalchemy_url


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
    with session_scope(_url()) as s:
        claim(s, plan_id)
        digest = repo.put_blob(s, block_npz(res, transposed), "bfb-block", "application/x-npz")
        plan = repo.get_plan(s, plan_id)
        lo, hi = weighted(plan, "schedule", 0.4), weighted(plan, "schedule", 0.75)
        repo.advance(s, plan_id, stage="schedule", progress=min(hi, max(lo, plan.progress) + (hi - lo) / 16),
                     message=f"solved receivers {receivers[0]}..{receivers[-1]}"
                             + (" of the transpose" if transposed else ""), attempt=current_attempt())
    return digest


def _load_block(digest: str) -> tuple[bool, BlockResult]:
    with session_scope(_url()) as s:
        data, _ = repo.get_blob(s, digest)
    return block_from_npz(data)


def stage_schedules(state: dict, plan_id: str, block_digests: list[str] | None = None) -> dict:
    """Build (or merge the fanned-out blocks into) allgather, reduce-scatter and allreduce schedules,
    model-check every one, and store them as artifacts."""
    if state.get("stop"):
        return state
    expr = state["selected"]["expr"]
    advance(plan_id, "schedule", 0.75 if block_digests else 0.4, "building schedules")
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
        built = construct_collectives(expr)
        ag, rs = built[Collective.ALLGATHER].schedule, built[Collective.REDUCESCATTER].schedule
        schedules = {Collective.ALLGATHER: ag, Collective.REDUCESCATTER: rs, Collective.ALLREDUCE: allreduce(rs, ag)}
    encode = size_sets.encoder()            # the sets' ranges are mostly these schedules: each encoded once
    blobs = {c: encode(sched) for c, sched in schedules.items()}
    spec = plan_spec(plan_id)
    if get_settings().embedded:         # the main XML files compile meanwhile (services.jobs.stages.early_compile)
        early_compile.start_plan(plan_id, spec, {c.value: s for c, s in schedules.items()},
                                 {c.value: len(b) for c, b in blobs.items()}, topo)
    try:
        return _checked_and_stored(state, plan_id, spec, topo, schedules, blobs, encode)
    except BaseException:
        early_compile.cancel(plan_id)
        raise


def _checked_and_stored(state: dict, plan_id: str, spec: PlanSpec, topo, schedules: dict, blobs: dict,
                        encode) -> dict:
    """Model-check the schedules against the frontier's prices, build their schedule sets and store them (the
    serialized `blobs`, and the ranges' through `encode`, which made them) with their link loads and the
    topology."""
    expr = state["selected"]["expr"]
    advance(plan_id, "verify", 0.85, "model-checking the schedules")
    summaries, loads, reports = {}, {}, {}
    for c, sched in schedules.items():
        # the allreduce is allreduce(rs, ag) of the two schedules just checked: its report is theirs
        # (verify_allreduce_phases, the lemma in its docstring); simulated again only when a phase failed
        report = reports[c] = (verify_allreduce_phases(reports[Collective.REDUCESCATTER],
                                                       reports[Collective.ALLGATHER], sched.steps)
                               if c is Collective.ALLREDUCE else verify(sched, topo))
        if not report.ok:
            raise RuntimeError(f"the {c.value} schedule of {expr} failed model checking: {report.violation.message}")
        promised = state["selected"].get("costs", {}).get(c.value)
        if promised and (report.steps, report.tau) != (promised["steps"], Fraction(promised["tau_exact"])):
            raise RuntimeError(f"the {c.value} schedule of {expr} costs {report.steps} steps, tau {report.tau}; "
                               f"the frontier priced it at {promised['steps']} steps, tau {promised['tau_exact']}")
        loads[c] = link_loads_blob(sched, topo, report.tau)
        summaries[c.value] = {"steps": report.steps, "tau": float(report.tau), "tau_exact": str(report.tau),
                              "verified": True, "transfers": report.transfers}
    sets = size_sets.plan_sets(topo, spec.link, schedules)
    advance(plan_id, "store", 0.95, "storing artifacts")
    # the blobs are content-addressed (a redelivery writes the same ones): stored first, in their own
    # transaction, so the plan's row is held only while they are attached and the heartbeat is never kept out
    topology_doc = topology_json(topo)
    topology_blob, graphml_blob = json.dumps(topology_doc).encode(), topology_graphml(topo, topology_doc)
    with session_scope(_url()) as s:
        digests = {c: (repo.put_blob(s, blobs[c], "schedule", "application/x-npz", compress=False),
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
        for c, rows in size_sets.store_sets(s, plan_id, "", sets, encode).items():
            summaries[c]["by_size"] = rows
        repo.attach(s, plan_id, "topology", digest, {"nodes": topo.nodes, "degree": topo.degree})
        repo.attach(s, plan_id, "topology:graphml", graphml, {"nodes": topo.nodes, "degree": topo.degree})
    return {**state, "schedules": summaries, "topology_digest": digest,
            "topology_facts": topology_facts(topo)}
