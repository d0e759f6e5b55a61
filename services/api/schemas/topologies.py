"""Topology bodies: an evaluation request (an expression, or nodes and edges that may price their own
links) and its result, and the topology a plan chose.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.jobs.requests.evaluation_request import EVALUATE_MAX_NODES
from services.synthesis.bfb.lp import BFB_MAX_DEGREE

from .common import Bytes, CollectiveCost, CollectiveName, Input, MAX_ALPHA_US, MAX_GBPS, MIN_GBPS, MIN_LINK_GBPS

__all__ = ["CandidateOut", "EdgeIn", "EvaluateOut", "EvaluateRequest", "EvaluationAccepted", "EvaluationOut",
           "TopologyOut"]


class CandidateOut(BaseModel):
    """A topology with the cost of the schedule that ships for it: T_L = steps * alpha, T_B = tau * M/B (of
    the entry's collective; the allgather's when there is none)."""

    expr: str
    nodes: int
    degree: int
    steps: int
    tau: float
    tau_exact: str
    diameter: int | None = None
    bw_optimal: bool
    moore_optimal: bool
    bidirectional: bool
    workload_time_us: float | None = Field(default=None, description="the workload's time on this topology "
                                           "(a training workload: its iteration time)")


class TopologyOut(CandidateOut):
    collective: CollectiveName | None = Field(default=None, description="whose cost steps, tau, t_l_us and "
                                              "t_b_us_per_mib are: the allgather's, whatever the workload's "
                                              "collective; `costs` has every collective's")
    costs: dict[CollectiveName, "CollectiveCost"] | None = Field(default=None, description="every collective's "
                                                                 "cost (steps, tau) on this topology")
    t_l_us: float | None = None
    t_b_us_per_mib: float | None = Field(default=None, description="T_B of one MiB message (tau * 2^20 / B)")
    distance_counts: list[int] | None = Field(default=None, description="ordered node pairs at distance "
                                              "1, 2, ..., diameter (the distance distribution)")
    mean_distance: float | None = None


def _pair_or_object(schema: dict) -> None:
    """EdgeIn's JSON schema: [tail, head] or the object (what its before-validator accepts)."""
    obj = dict(schema)
    schema.clear()
    schema.update({"title": obj.get("title", "EdgeIn"), "description": "an arc: [tail, head], or an object that may "
                   "carry the link's own latency and bandwidth",
                   "anyOf": [{"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1 << 20},
                              "minItems": 2, "maxItems": 2}, obj]})


class EdgeIn(Input):
    """One arc: [tail, head], or an object that may carry the link's own latency and bandwidth."""

    model_config = ConfigDict(json_schema_extra=lambda schema, _: _pair_or_object(schema))

    tail: int = Field(strict=True, ge=0, lt=EVALUATE_MAX_NODES)
    head: int = Field(strict=True, ge=0, lt=EVALUATE_MAX_NODES)
    alpha_us: float | None = Field(default=None, ge=0, le=MAX_ALPHA_US, description="this link's latency (default: "
                                   "the request's alpha_us)")
    bandwidth_gbps: float | None = Field(default=None, ge=MIN_LINK_GBPS, le=MAX_GBPS, description="this link's own "
                                         "bandwidth (default: the request's bandwidth_gbps / d)")

    @model_validator(mode="before")
    @classmethod
    def _pair(cls, v):
        if isinstance(v, (list, tuple)):
            if len(v) != 2:
                raise ValueError("an edge is [tail, head] or an object {tail, head, alpha_us, bandwidth_gbps}")
            return {"tail": v[0], "head": v[1]}
        return v


class EvaluateRequest(Input):
    expr: str | None = Field(default=None, max_length=2000, description="a topology expression (ASCII: names, "
                             "decimal digits 0-9, ( ) , >)")
    nodes: int | None = Field(default=None, strict=True, ge=2, le=EVALUATE_MAX_NODES)
    edges: list[EdgeIn] | None = Field(default=None, max_length=16384, description="explicit arcs, each [tail, head] "
                                       "or {tail, head, alpha_us, bandwidth_gbps} (per-link costs: heterogeneous "
                                       "BFB, LP (14), joins BFB and the greedy scheduler; the faster verified "
                                       f"schedule is served); no self-loops, every node's in- and out-degree at "
                                       f"most {BFB_MAX_DEGREE}")
    alpha_us: float = Field(default=10.0, ge=0, le=MAX_ALPHA_US, description="latency of links an edge does not "
                            "price")
    bandwidth_gbps: float = Field(default=100.0, ge=MIN_GBPS, le=MAX_GBPS, description="a node's egress bandwidth "
                                  "B: a link an edge does not price carries B/d")
    size_bytes: Bytes = Field(default=1 << 20, description="M: decides which schedule is faster when links differ")
    collective: CollectiveName = "allgather"
    with_arcs: bool = Field(default=False, description="also return the arcs with their Konig permutation "
                                                       "(for drawing the topology), for topologies of at most "
                                                       "256 nodes")

    @model_validator(mode="after")
    def _one(self):
        if (self.expr is None) == (self.edges is None):
            raise ValueError("give either expr or nodes + edges")
        if self.edges is not None and self.nodes is None:
            raise ValueError("an edge list needs nodes")
        return self


class EvaluationAccepted(BaseModel):
    """The evaluation runs in a worker: poll `url` (or POST the same request again)."""

    id: str
    status: Literal["queued", "running"]
    url: str


class EvaluateOut(BaseModel):
    id: str | None = Field(default=None, description="the evaluation's id (the same request is the same one)")
    url: str | None = Field(default=None, description="the evaluation's URL (GET it again later)")
    expr: str
    collective: str
    nodes: int
    degree: int
    diameter: int
    steps: int
    tau: float
    tau_exact: str
    bw_optimal: bool
    moore_optimal: bool
    verified: bool
    transfers: int
    seconds: float
    bidirectional: bool
    distance_counts: list[int] = Field(description="ordered node pairs at distance 1, 2, ..., diameter")
    mean_distance: float
    arcs: list[tuple[int, int, int]] | None = Field(default=None, description="[tail, head, lane] per arc "
                                                    "(with_arcs)")
    permutation: list[int] | None = Field(default=None, description="per arc, its permutation in a Konig "
                                          "split into d permutations (with_arcs)")
    heterogeneous: bool = Field(default=False, description="the edges priced links differently")
    scheduler: str | None = Field(default=None, description="heterogeneous: the scheduler served (bfb-hetero, "
                                  "bfb, greedy, trees or bfb-fast), the fastest whose schedule passed the model "
                                  "checker")
    time_us: float | None = Field(default=None, description="heterogeneous: the served schedule's time for "
                                  "size_bytes on these links, measured from the schedule")
    candidates: list[dict] | None = Field(default=None, description="heterogeneous: every scheduler's steps, tau, "
                                          "time_us and whether it was verified")


class EvaluationOut(BaseModel):
    id: str
    url: str = Field(description="this evaluation's URL")
    status: Literal["queued", "running", "done", "failed"]
    expr: str
    collective: str
    reason: str | None = None
    result: EvaluateOut | None = None
