"""Request and response bodies (pydantic v2). Units are in the field names (DESIGN section 7)."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

CollectiveName = Literal["allgather", "reducescatter", "allreduce"]


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    collective: CollectiveName | None = Field(default=None, description="one collective kind")
    collectives: list[CollectiveName] | None = Field(default=None, min_length=1, description="several kinds")
    sizes_bytes: list[int] = Field(min_length=1, max_length=1000, description="message sizes in bytes")
    weights: list[float] | None = Field(default=None, description="one non-negative weight per size")
    alltoall_bytes: int | None = Field(default=None, gt=0, description="bytes each node holds for an "
                                       "all-to-all (it sends 1/N of them to every node)")
    alltoall_weight: float = Field(default=0.0, ge=0, description="all-to-alls per unit of the weights above "
                                   "(the all-to-all share of the workload)")

    @field_validator("sizes_bytes")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        for x in v:
            if isinstance(x, bool) or x <= 0:
                raise ValueError("every size must be a positive number of bytes")
        return v

    @model_validator(mode="after")
    def _consistent(self):
        if self.collective is None and not self.collectives:
            self.collective = "allreduce"
        if self.weights is not None:
            if len(self.weights) != len(self.sizes_bytes):
                raise ValueError(f"weights has {len(self.weights)} entries but sizes_bytes has {len(self.sizes_bytes)}")
            if any(w < 0 for w in self.weights):
                raise ValueError("weights must be non-negative")
        if self.alltoall_weight > 0 and self.alltoall_bytes is None:
            raise ValueError("an all-to-all share (alltoall_weight) needs alltoall_bytes")
        return self


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "job_id": "j1", "nodes": 16, "degree": 4, "alpha_us": 10, "bandwidth_gbps": 100,
        "workload": {"collective": "allreduce", "sizes_bytes": [1048576, 104857600]}}]})

    job_id: str = Field(min_length=1, max_length=200)
    nodes: int = Field(strict=True, ge=2, le=4096, description="number of hosts N")
    degree: int = Field(strict=True, ge=1, le=16, description="ports per host d")
    alpha_us: float = Field(ge=0, le=1e6, description="per-step latency alpha in microseconds")
    bandwidth_gbps: float = Field(gt=0, le=1e6, description="a host's total egress bandwidth B in Gbit/s")
    bidirectional_only: bool = Field(default=False, description="only topologies duplex cables can realise")
    workload: Workload
    fabric_id: str | None = Field(default=None, max_length=100, description="bind the plan to this fabric")
    hosts: list[str] | None = Field(default=None, description="the fabric hosts to use (default: the first "
                                                                "free ones); one per node")

    @model_validator(mode="after")
    def _hosts(self):
        if self.hosts is not None:
            if self.fabric_id is None:
                raise ValueError("hosts are only meaningful with a fabric_id")
            if len(self.hosts) != self.nodes or len(set(self.hosts)) != len(self.hosts):
                raise ValueError(f"hosts must list {self.nodes} distinct hosts, one per node")
        return self


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
    workload_time_us: float | None = None


class TopologyOut(CandidateOut):
    t_l_us: float | None = None


class CollectiveCost(BaseModel):
    """T_L = steps * alpha and T_B = tau * M/B of one collective's schedule."""

    steps: int
    tau: float
    tau_exact: str


class FrontierEntry(CandidateOut):
    collective: CollectiveName = Field(default="allgather", description="whose cost steps and tau are")
    family: str
    schedule: Literal["bfb", "construction"] = Field(default="bfb", description="how the expression's top level "
                                                     "is built: BFB on the whole graph or the expansion's definition")
    reverse_symmetric: bool | None = Field(default=None, description="isomorphic to its transpose (Definition 6): "
                                           "reduce-scatter then costs what allgather does")
    costs: dict[CollectiveName, CollectiveCost] | None = Field(default=None, description="every collective's cost")
    alltoall_f: float | None = Field(default=None, description="all-to-all throughput f (MCF, LP (3)) when "
                                                               "the workload has an all-to-all share")


class ScheduleSummary(BaseModel):
    steps: int
    tau: float
    tau_exact: str
    verified: bool
    transfers: int
    url: str


class PlanEventOut(BaseModel):
    at: datetime
    status: str
    stage: str
    progress: float
    message: str | None


class Progress(BaseModel):
    fraction: float
    stage: str


class PlanOut(BaseModel):
    id: str
    job_id: str
    status: Literal["queued", "running", "done", "failed"]
    progress: Progress
    reason: str | None = None
    created_at: datetime
    updated_at: datetime
    request: dict
    topology: TopologyOut | None = None
    frontier: list[FrontierEntry] | None = None
    schedules: dict[str, ScheduleSummary] | None = None
    predicted_time_us: dict[str, dict[str, float]] | None = None
    baselines_time_us: dict[str, float] | None = Field(default=None, description="the workload on today's "
                                                       "topologies (ring, shifted rings, double binary tree, torus)")
    fabric: dict | None = Field(default=None, description="fabric binding: hosts, panels and the config "
                                                          "versions the plan needs, fabric_ready, released")
    links: dict[str, str]


class PlanAccepted(BaseModel):
    id: str
    status: str
    url: str


class FrontierOut(BaseModel):
    nodes: int
    degree: int
    bidirectional: bool
    collective: CollectiveName = "allgather"
    cached: bool
    bound: dict
    entries: list[FrontierEntry]


class EvaluateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expr: str | None = Field(default=None, max_length=2000, description="a topology expression")
    nodes: int | None = Field(default=None, strict=True, ge=2, le=1024)
    edges: list[tuple[int, int]] | None = Field(default=None, max_length=16384, description="explicit arcs [tail, head]")
    collective: CollectiveName = "allgather"

    @model_validator(mode="after")
    def _one(self):
        if (self.expr is None) == (self.edges is None):
            raise ValueError("give either expr or nodes + edges")
        if self.edges is not None and self.nodes is None:
            raise ValueError("an edge list needs nodes")
        return self


class EvaluateOut(BaseModel):
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


class ErrorOut(BaseModel):
    detail: str


class FabricLayout(BaseModel):
    """Shortcut for the common cablings: `planes` (host port k on panel plane{k}, port = host index) or
    `shared` (every host port on one panel)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    layout: Literal["planes", "shared"]
    hosts: int | list[str] = Field(description="a host count, or the host ids")
    ports_per_host: int = Field(strict=True, ge=1, le=64)
    kind: Literal["patch_panel", "ocs"] = "patch_panel"
    panel_prefix: str | None = Field(default=None, max_length=50, pattern=r"^[A-Za-z0-9_.-]+$")


class PanelStateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    applied_version: int = Field(strict=True, ge=0, description="the config version the agent applied")
    status: Literal["applied", "failed"]
    message: str | None = Field(default=None, max_length=2000)
    connections: list[dict] | None = Field(default=None, description="the cross-connects now on the panel, "
                                                                     "[{ingress, egress}]")
