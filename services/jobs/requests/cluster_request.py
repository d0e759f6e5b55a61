"""The request side of shared-cluster simulations (POST /v1/cluster/simulations; the job runs in a worker as an
evaluation of kind `cluster`: services.jobs.kinds.evaluation). The request is a `ClusterSimulationRequest`,
checked whole (the library's `ClusterSpec` refuses what it cannot simulate) before anything is queued; its id is
the sha256 of its canonical form, so the same request is the same simulation."""
from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KIND", "ClusterSimulationRequest", "prepare", "run"]

KIND = "cluster"


class ClusterSimulationRequest(BaseModel):
    """A job mix at several loads on several fabrics (services.synthesis.evaluate.cluster; TopoOpt section 5.6)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    servers: int = Field(432, ge=2, le=8192)
    degree: int = Field(8, ge=1, le=64)
    bandwidth_gbps: float = Field(100.0, gt=0, le=1e5, description="one port's bandwidth (a server sends d x B)")
    alpha_us: float = Field(1.0, gt=0, le=1e6)
    mix: dict[str, float] = Field(default_factory=lambda: {"dlrm": 0.4, "bert-topoopt": 0.3, "candle": 0.2,
                                                           "vgg16": 0.1}, min_length=1, max_length=16)
    servers_per_job: int = Field(16, ge=2, le=8192)
    gpus_per_server: int = Field(4, ge=1, le=64)
    jobs: list[int] = Field(default_factory=lambda: [5, 10, 15, 20, 27], min_length=1, max_length=16)
    fabrics: list[Literal["direct", "fat-tree", "fat-tree-2to1", "fat-tree-4to1", "rail-optimised"]] = Field(
        default_factory=lambda: ["direct", "fat-tree", "fat-tree-2to1"], min_length=1, max_length=5)
    iterations: int = Field(1000, ge=1, le=10 ** 9)
    fat_tree_cost_ratio: float | None = Field(None, gt=0, le=100, description="a full-bisection fat-tree's cost "
                                              "over TopoOpt's at equal bandwidth (default: Table 2's prices at "
                                              "this cluster, TopoOpt App. G; section 5.2's average is 3.2)")
    placement: Literal["packed", "random"] = "packed"
    seed: int = Field(0, ge=0, le=2 ** 31)
    panel: Literal["patch_panel", "ocs", "none"] = "patch_panel"
    lookahead: bool = False
    routing: Literal["ecmp", "spray"] = Field("ecmp", description="switched fabrics: each flow on one random "
                                              "shortest path (ECMP; TopoOpt's htsim TCP), or sprayed over all "
                                              "of them (NDP)")
    precision: Literal["bf16", "tf32", "fp32"] = Field("bf16", description="the GPUs' dense peak the compute "
                                                       "runs at (datasheet)")


def _spec(request: dict):
    from services.fabric.devices import PROFILES
    from services.synthesis.evaluate.cluster import ClusterSpec, Reconfiguration

    body = ClusterSimulationRequest.model_validate({k: v for k, v in request.items() if k != "kind"})
    reconf = None
    if body.panel != "none":
        p = PROFILES[body.panel]
        reconf = Reconfiguration(p.reconfiguration_s, p.robot_batch_size, lookahead=body.lookahead)
    ratio = body.fat_tree_cost_ratio
    if ratio is None:                      # the cost-equivalent fat-tree at this cluster (TopoOpt 5.1, App. G)
        from services.fabric.cost import cost_equivalent_ratio

        ratio = cost_equivalent_ratio(body.servers, body.degree, body.bandwidth_gbps)
    return ClusterSpec(body.servers, body.degree, body.bandwidth_gbps, tuple(body.mix.items()), body.servers_per_job,
                       body.gpus_per_server, body.alpha_us, "a100", body.iterations, ratio,
                       body.placement, body.seed, reconf, body.routing, body.precision), body


def prepare(body: ClusterSimulationRequest) -> tuple[str, dict]:
    """(id, canonical request) of a valid request; ValueError with the reason otherwise (what the simulator would
    refuse: unknown models, more jobs than fit, ...)."""
    from services.synthesis.evaluate.cluster import MAX_JOBS

    request = {"kind": KIND, **body.model_dump()}
    spec, _ = _spec(request)                       # the library's own checks
    for count in body.jobs:
        if not 1 <= count <= min(spec.max_jobs, MAX_JOBS):
            raise ValueError(f"{count} jobs of {spec.servers_per_job} servers do not fit {spec.servers} servers "
                             f"(1..{spec.max_jobs})")
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest(), request


def run(request: dict) -> dict:
    """The worker's part: the rows of `simulate_cluster` for the request."""
    from services.synthesis.evaluate.cluster import simulate_cluster

    spec, body = _spec(request)
    return {"results": [r.to_dict() for r in simulate_cluster(spec, list(body.jobs), list(body.fabrics))]}
