"""Plan bodies (POST /v1/plans and its views): the request (workload: message sizes or a training job; the
typed PlanSpec the jobs carry) and the plan with its topology, schedules, predicted times, all-to-all and link loads.
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from services.jobs.requests.plan_spec import (MAX_PLAN_LAYERS, MAX_PLAN_NODES, CatalogModelName, DeviceName,
                                              Parallelism, PlanSpec, TrainingWorkload, Workload)

from .common import PlanStatus, Progress, ScheduleCollective
from .frontiers import FrontierEntry
from .topologies import TopologyOut
from .training import HybridTrainingOut, TrainingOut

__all__ = ["AllToAllOut", "AllToAllTimes", "CatalogModelName", "DeviceName", "LinkColumn", "LinkLoadsOut",
           "MAX_PLAN_LAYERS", "MAX_PLAN_NODES", "Parallelism", "PlanAccepted", "PlanEventOut", "PlanOut",
           "PlanRequest", "ScheduleSummary", "SizeRangeOut", "TopoOptStrategyOut", "TopologyStrategyOut",
           "TrainingWorkload", "Workload"]


class PlanRequest(PlanSpec):
    # POST /v1/plans's body is the typed request the jobs carry (services.jobs.requests.plan_spec.PlanSpec):
    # the route passes this object on; the OpenAPI document names it PlanRequest
    pass


class SizeRangeOut(BaseModel):
    """One range of a schedule set: sizes [min_bytes, max_bytes) (max_bytes null: unbounded) served by the
    verified schedule of `scheduler`, fetched at `url`."""

    min_bytes: int
    max_bytes: int | None
    scheduler: str
    steps: int
    tau: float
    tau_exact: str
    verified: bool
    time_pieces: list[list[float]] | None = Field(default=None, description="the served (dependency-driven) time "
                                                  "of this range's schedule as a function of the size M: pieces "
                                                  "[start_bytes, latency_us, us_per_byte], T(M) = latency_us + "
                                                  "us_per_byte * M from each start on (docs/schedule-time.md)")
    url: str


class ScheduleSummary(BaseModel):
    steps: int
    tau: float
    tau_exact: str
    verified: bool
    transfers: int
    url: str
    by_size: list[SizeRangeOut] | None = Field(default=None, description="the schedule set: size ranges tiling "
                                               "[0, inf), each with the schedule fastest over it")


class AllToAllTimes(BaseModel):
    schedule_us: float = Field(description="steps * alpha + tau * D/B of the verified schedule")
    mcf_bound_us: float = Field(description="(D/N) / (f B/d): the MCF throughput's bandwidth-only time")


class AllToAllOut(BaseModel):
    """The chosen topology's all-to-all schedule (time-stepped LP, model-checked) against the MCF bound."""

    status: Literal["built", "refused"]
    reason: str | None = Field(default=None, description="why no schedule was built (refused)")
    expr: str
    steps: int | None = None
    tau: float | None = Field(default=None, description="T_B = tau * D/B, D the bytes per node, measured from "
                              "the schedule")
    tau_exact: str | None = None
    mcf_throughput: float | None = None
    mcf_tau: float | None = Field(default=None, description="the MCF bound's tau: d / (N f)")
    bandwidth_over_mcf: float | None = Field(default=None, description="tau / mcf_tau (1: at the bound)")
    lp_steps: int | None = None
    lp_tau: float | None = None
    chunks_per_block: int | None = None
    transfers: int | None = None
    verified: bool | None = None
    seconds: float | None = None
    times_us: dict[str, AllToAllTimes] = Field(default_factory=dict, description="per all-to-all size (bytes "
                                               "per node): the schedule's time and the MCF bound")
    url: str | None = None


class PlanEventOut(BaseModel):
    at: datetime
    status: str
    stage: str = Field(description="the plan's stage, or a revision's as `rev{n}:{stage}`")
    progress: float
    message: str | None
    started_at: datetime | None = Field(default=None, description="set on the event that starts a stage and on "
                                        "the one that closes it")
    ended_at: datetime | None = Field(default=None, description="set on the event that closes a stage")
    duration_s: float | None = Field(default=None, description="the stage's duration (on the closing event)")


class TopoOptStrategyOut(BaseModel):
    """One parallelisation strategy TopoOpt weighed (section 4's alternation), priced on TopoOpt's own model."""

    name: str = Field(description="model-parallel (the request's) or data-parallel")
    allreduce_rings: int
    mp_matchings: int
    topoopt_model_iteration_s: float


class TopologyStrategyOut(BaseModel):
    """The plan's topology by TopoOpt's co-optimisation (NSDI'23 section 4, Algorithm 1) beside the finder's best."""

    strategy: Literal["topoopt"]
    parallelisation: str = Field(description="the strategy the served topology was built for: the request's "
                                 "(model-parallel layers stay model-parallel)")
    expr: str = Field(description="the served topology (its arcs)")
    allreduce_rings: int = Field(description="ports per host on AllReduce rings (TotientPerms)")
    generators: list[int] = Field(description="the rings' offsets p (x -> x + p)")
    mp_matchings: int = Field(description="ports per host on model-parallel matchings")
    bandwidth_tax: float = Field(description="MP bytes carried over bytes asked (host forwarding, TopoOpt 5.4)")
    longest_route: int = Field(description="hops of the longest forwarded MP route")
    iteration_s: float = Field(description="the iteration on the served (verified) schedules of this topology")
    topoopt_model_iteration_s: float = Field(description="the iteration on TopoOpt's own model: AllReduce on its "
                                             "rings, MP traffic host-forwarded over shortest paths")
    strategies: list[TopoOptStrategyOut]
    finder_best: str = Field(description="the finder's fastest frontier entry for the job")
    finder_best_iteration_s: float


class PlanOut(BaseModel):
    id: str
    job_id: str
    status: PlanStatus
    progress: Progress
    reason: str | None = None
    created_at: datetime
    updated_at: datetime
    request: dict
    topology: TopologyOut | None = None
    frontier: list[FrontierEntry] | None = None
    schedules: dict[str, ScheduleSummary] | None = None
    predicted_time_us: dict[str, dict[str, float]] | None = Field(default=None, description="per collective and "
                                                                  "size: the served schedule's dependency-driven "
                                                                  "time (what the runtimes realise; "
                                                                  "docs/schedule-time.md)")
    barrier_time_us: dict[str, dict[str, float]] | None = Field(default=None, description="the same schedules' "
                                                                "step-synchronous price (the paper's: each step "
                                                                "waits for its slowest link)")
    baselines_time_us: dict[str, float] | None = Field(default=None, description="the workload on today's "
                                                       "topologies (ring, shifted rings, double binary tree, torus; "
                                                       "a training workload: their iteration times)")
    training: TrainingOut | None = Field(default=None, description="a training workload's iteration on every "
                                         "frontier entry and baseline")
    training_hybrid: HybridTrainingOut | None = Field(default=None, description="a hybrid-parallel training "
                                                      "workload (multi-GPU hosts): every frontier entry and "
                                                      "baseline with its fastest strategy")
    alltoall: AllToAllOut | None = Field(default=None, description="the all-to-all schedule, when the workload "
                                         "has an all-to-all (alltoall_bytes, or MoE layers)")
    topology_strategy: TopologyStrategyOut | None = Field(default=None, description="how the topology was chosen, "
                                                          "when the request's topology strategy is topoopt")
    fabric: dict | None = Field(default=None, description="fabric binding: hosts, panels and the config "
                                                          "versions the plan needs, fabric_ready, released, the "
                                                          "plane (active or lookahead) and side it is on, "
                                                          "ready_estimate_s and the capital cost")
    compiled: dict[str, dict[str, dict]] | None = Field(default=None, description=(
        "runtime -> collective -> the compiled XML with the runtime's default options: status (done or failed), "
        "url, XML steps, thread blocks, lowering, predicted time; or the limit that refused it. `by_size`: one "
        "file per size range of the collective's schedule set (minBytes/maxBytes set to the range's window), "
        "each with its url (`&range=i`), status and `xml_schedule` (the schedule the file holds: the range's, "
        "or, when the range's grid is finer than a file holds, the fastest over the range that fits, with its "
        "steps, tau and predicted times); `by_size_skipped`: ranges without a file and why"))
    compile_failed: list[dict] | None = Field(default=None, description=(
        "every file of the compile stage that failed or was refused: runtime, file (`collective` or "
        "`collective@range`) and the reason (a refusal's limit, or the compile process killed)"))
    revision: dict | None = Field(default=None, description="done plans: the current revision (what to run; 0 is "
                                  "the plan itself, later ones follow failure reports and repairs), its topology, "
                                  "the failed links, how many revisions there are and their URL")
    links: dict[str, str]


class PlanAccepted(BaseModel):
    id: str
    status: str
    url: str


class LinkColumn(BaseModel):
    """One column of the heat map: one arc, or consecutive arcs first_arc..last_arc (arc order is by tail)."""

    first_arc: int
    last_arc: int
    tail: int
    last_tail: int
    head: int | None = Field(description="the arc's head (single-arc columns only)")
    lane: int | None = Field(description="the arc's lane among parallel arcs (single-arc columns only)")


class LinkLoadsOut(BaseModel):
    collective: ScheduleCollective
    nodes: int
    degree: int
    steps: int
    arcs: int
    arcs_per_column: int = Field(description="arcs grouped in one column (1: every link has its own)")
    unit: str = Field(description="a shard (M/N bytes), or for an all-to-all a block (D/N bytes)")
    links: list[LinkColumn]
    loads: list[list[float]] = Field(description="loads[t-1][c]: the most any arc of column c carries in "
                                     "comm step t, in units")
    step_max: list[float] = Field(description="the most any link carries in each step, in units")
    step_mean: list[float] = Field(description="the mean load over all links in each step, in units")
    tau: float = Field(description="d/N * sum of step_max: T_B = tau * M/B, measured from these loads")
