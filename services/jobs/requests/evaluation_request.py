"""The request side of topology evaluations (POST /v1/topologies/evaluate; the job is services.jobs.kinds.evaluation:
the optimal BFB schedule of one topology for one collective, model-checked, with the cost measured from the
schedule itself).

The request path sizes the expression from its tree (services.synthesis.topology.size) and refuses anything
beyond EVALUATE_MAX_NODES or BFB's degree limit before building it; it then builds the graph only to check
that it is a valid topology (regular, strongly connected: linear in its arcs, at most 1024 x 62 of them).
The BFB solve and the model check run in a worker (services.jobs.kinds.evaluation) under the task time and memory
limits. An evaluation's id is the sha256 of its canonical request, so the same request is the same
evaluation: its stored result or its stored failure.
"""
from __future__ import annotations

import hashlib
import json

from services.store.db import insert_new
from services.store.models import Evaluation

__all__ = ["EVALUATE_MAX_NODES", "WITH_ARCS_MAX_NODES", "LINK_DEFAULTS", "EdgeError", "check_edges", "prepare",
           "submit", "as_dict", "link_costs"]

EVALUATE_MAX_NODES = 1024
WITH_ARCS_MAX_NODES = 256        # the dashboard draws topologies up to this size (EvaluateRequest.with_arcs)


class EdgeError(ValueError):
    """A bad edge (`loc`: where in the request's edge list, the message: why)."""

    def __init__(self, loc: tuple, msg: str):
        self.loc = tuple(loc)
        super().__init__(msg)


def prepare(expr: str | None, nodes: int | None, edges: list[dict] | None, collective: str,
            links: dict | None = None) -> tuple[str, dict]:
    """(evaluation id, canonical request) of a valid request; ValueError (with the reason; EdgeError naming the
    edge) otherwise. `edges` are {tail, head, alpha_us?, bandwidth_gbps?}; when any edge prices its link, the
    request is heterogeneous and `links` ({alpha_us, bandwidth_gbps, size_bytes}) prices the others."""
    from services.synthesis.bfb.lp import BFB_MAX_DEGREE
    from services.synthesis.topology.catalog import build
    from services.synthesis.topology.expr import parse
    from services.synthesis.topology.size import check_build, size

    priced = []
    if expr is None:
        check_edges(nodes, edges, BFB_MAX_DEGREE)
        arcs = ", ".join(f"{e['tail']}>{e['head']}" for e in edges)
        expr = f"edges({nodes}, {arcs})"
        priced = _priced_links(edges)
    tree = parse(expr)
    sz = check_build(size(tree))
    if sz.nodes > EVALUATE_MAX_NODES:
        raise ValueError(f"{sz.nodes} nodes: evaluation is limited to {EVALUATE_MAX_NODES}; submit a plan instead")
    if sz.degree > BFB_MAX_DEGREE:
        raise ValueError(f"{sz.expr} has degree {sz.degree}; BFB schedules are built for degree at most "
                         f"{BFB_MAX_DEGREE} (each source's eligible in-arcs are one 64-bit mask)")
    topo = build(tree)                      # strongly connected, or a TopologyError
    request = {"expr": topo.expr, "collective": collective}
    if priced:
        request["links"] = {**{k: (links or {}).get(k, v) for k, v in LINK_DEFAULTS.items()}, "links": priced}
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest(), request


def check_edges(nodes: int, edges: list[dict], max_degree: int) -> None:
    """What the worker would refuse, refused in the request (EdgeError naming the edge): a node outside
    0..nodes-1, a self-loop (it takes one of the node's ports and carries nothing), and a node with more than
    `max_degree` out-arcs or in-arcs - each node's own count, not the average the expression's size gives."""
    out_deg: dict[int, int] = {}
    in_deg: dict[int, int] = {}
    for i, e in enumerate(edges):
        for end in ("tail", "head"):
            if not 0 <= e[end] < nodes:
                raise EdgeError(("edges", i, end), f"edge [{e['tail']}, {e['head']}] names a node outside "
                                                   f"0..{nodes - 1}")
        if e["tail"] == e["head"]:
            raise EdgeError(("edges", i), f"edge [{e['tail']}, {e['head']}] is a self-loop: it takes one of the "
                                          "node's ports and carries nothing; leave it out")
        for deg, node, which in ((out_deg, e["tail"], "out"), (in_deg, e["head"], "in")):
            deg[node] = deg.get(node, 0) + 1
            if deg[node] > max_degree:
                raise EdgeError(("edges", i), f"node {node} has more than {max_degree} {which}-arcs (this edge is "
                                              f"one too many): BFB schedules take nodes of degree at most "
                                              f"{max_degree}")


LINK_DEFAULTS = {"alpha_us": 10.0, "bandwidth_gbps": 100.0, "size_bytes": float(1 << 20)}


def _priced_links(edges: list[dict]) -> list[dict]:
    """The link-table entries (services.synthesis.schedule.links) of the edges that price their link; parallel
    edges of one pair are its lanes in the order given."""
    seen: dict[tuple[int, int], int] = {}
    out = []
    for e in edges:
        pair = (e["tail"], e["head"])
        lane = seen.get(pair, 0)
        seen[pair] = lane + 1
        values = {k: e[k] for k in ("alpha_us", "bandwidth_gbps") if e.get(k) is not None}
        if values:
            out.append({"arc": f"{pair[0]}>{pair[1]}", "lane": lane, **values})
    return out


def link_costs(topo, links: dict):
    """LinkCosts of the priced edges over the request's defaults (B/d per link). The request schema checked
    every value (finite, alpha >= 0, bandwidth > 0) and the arcs are the edges', so the table is valid."""
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.schedule.links import link_costs_from_json

    return link_costs_from_json(topo, {"links": links["links"]},
                                default=LinkModel.from_units(links["alpha_us"], links["bandwidth_gbps"]))


def submit(s, evaluation_id: str, request: dict) -> tuple[Evaluation, bool]:
    """The evaluation of this request: the existing one, or a new queued one. (evaluation, created)"""
    created = s.get(Evaluation, evaluation_id) is None and insert_new(
        s, Evaluation, id=evaluation_id, request=request, status="queued", stage="queued", attempts=0)
    return s.get(Evaluation, evaluation_id), created      # the same request at once: one row, both see it


def as_dict(ev: Evaluation) -> dict:
    return {"id": ev.id, "kind": ev.request.get("kind", "topology"), "status": ev.status, "expr": ev.request.get("expr"),
            "collective": ev.request.get("collective"), "reason": ev.reason, "result": ev.result}
