"""The artifacts a job stores and the API serves, and how they are written (DESIGN 4.2 artifacts): the topology
as JSON (arcs and their Konig permutations) and GraphML, its facts, a schedule's per-step link loads (npz),
a schedule as JSON (the npz IR itself is services.synthesis.schedule.ir.Schedule.to_bytes), and one solved
receiver block of a fanned-out BFB solve (npz). Plain functions of library objects and bytes: the job kinds
(services.jobs) write them, the API's routes (services.api) read them.
"""
from __future__ import annotations

import io
import json
from fractions import Fraction

import numpy as np

from services.synthesis.bfb.lp import BlockResult
from services.synthesis.schedule.cost import link_loads
from services.synthesis.schedule.ir import Collective, Schedule

__all__ = ["JSON_MAX_TRANSFERS", "TooManyTransfers", "topology_json", "arc_permutations", "topology_facts",
           "topology_graphml", "link_loads_blob", "schedule_json", "schedule_json_bytes", "block_npz",
           "block_from_npz"]

JSON_MAX_TRANSFERS = 250_000     # format=json lists every transfer: beyond this, use format=npz


class TooManyTransfers(ValueError):
    """A schedule too large for its JSON view (the API answers 422 naming format)."""


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


def topology_graphml(t, doc: dict | None = None) -> bytes:
    """The topology as GraphML valid against graphml.xsd (services.synthesis.topology.graphml), from its
    topology_json document `doc` when the caller has it."""
    from services.synthesis.topology.graphml import topology_graphml as write

    return write(doc if doc is not None else topology_json(t))


def schedule_json_bytes(npz: bytes) -> bytes:
    """The JSON view of a stored schedule blob."""
    return json.dumps(schedule_json(Schedule.from_bytes(npz))).encode()


def schedule_json(sched: Schedule) -> dict:
    """The paper's tuples per step: [shard, sender, receiver, lane, lo, hi] (chunks in 1/grid of a shard);
    TooManyTransfers beyond JSON_MAX_TRANSFERS transfers (the npz blob serves any size)."""
    if sched.transfers > JSON_MAX_TRANSFERS:
        raise TooManyTransfers(f"this schedule has {sched.transfers} transfers; format=json "
                               f"lists at most {JSON_MAX_TRANSFERS}: use format=npz")
    steps = []
    for t in range(1, sched.steps + 1):
        sl = sched.step_slice(t)
        steps.append({"step": t, "op": "reduce" if sched.ops[t - 1] else "copy",
                      "transfers": [[int(v), int(a), int(b), int(l), int(lo), int(hi)] for v, a, b, l, lo, hi in
                                    zip(sched.source[sl], sched.sender[sl], sched.receiver[sl], sched.lane[sl],
                                        sched.lo[sl], sched.hi[sl])]})
    a2a = sched.collective is Collective.ALLTOALL
    return {"collective": sched.collective.value, "nodes": sched.nodes, "grid": sched.grid,
            "topology": sched.topology,
            "columns": ["source" if a2a else "shard", "sender", "receiver", "lane", "lo", "hi"],
            "chunk_unit": f"1/{sched.grid} of the source's buffer (block j = [j/N, (j+1)/N) goes to node j)"
                          if a2a else f"1/{sched.grid} of a shard", "steps": steps}


_BLOCK_FIELDS = ("receivers", "step", "source", "arc", "lo", "hi", "den", "u_num", "u_den")


def block_npz(res: BlockResult, transposed: bool) -> bytes:
    """One solved receiver block of LP (1) (services.synthesis.bfb.lp.solve_block) as an npz blob."""
    buf = io.BytesIO()
    np.savez(buf, **{k: getattr(res, k) for k in _BLOCK_FIELDS}, transposed=np.array([transposed]))
    return buf.getvalue()


def block_from_npz(data: bytes) -> tuple[bool, BlockResult]:
    """(transposed, the block) of a `block_npz` blob."""
    z = np.load(io.BytesIO(data))
    return bool(z["transposed"][0]), BlockResult(**{k: z[k] for k in _BLOCK_FIELDS})
