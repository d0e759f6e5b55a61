"""Request and response bodies (pydantic v2). Units are in the field names (DESIGN section 7)."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from services.jobs.evaluation_request import EVALUATE_MAX_NODES
from services.synthesis.bfb.lp import BFB_MAX_DEGREE
from services.synthesis.evaluate.devices import GPU_PROFILES
from services.synthesis.evaluate.model_catalog import catalog_names
from services.synthesis.evaluate.training_job import DEVICES, MAX_BUCKETS, DeviceProfile, ModelSpec
from services.synthesis.evaluate.transformer import LLM_CATALOG, TransformerModelFile

CollectiveName = Literal["allgather", "reducescatter", "allreduce"]
ScheduleCollective = Literal["allgather", "reducescatter", "allreduce", "alltoall"]
CatalogModelName = Literal[tuple(dict.fromkeys([*catalog_names(), *LLM_CATALOG]))]
DeviceName = Literal[tuple(dict.fromkeys([*DEVICES, *GPU_PROFILES]))]
MAX_PLAN_NODES = 2048              # the largest plan that fits the default task limits (4096 MiB, 1800 s): see
                                  # README "Limits" (N = 4096 at d = 4, 8, 16 ran out of memory in 'schedules')
MAX_PLAN_LAYERS = 10_000            # layers of an inline model: the simulation is O(layers x buckets x topologies)
PlanStatus = Literal["queued", "running", "done", "failed"]
MAX_BYTES = 1 << 50                 # 1 PiB: every time computed from it stays a finite float
MAX_WEIGHT = 1e6
INT32_MAX = (1 << 31) - 1           # integer columns
MAX_PANEL_PORTS = 1 << 17
MIN_GBPS = 1e-3                     # 1 Mbit/s: a host's egress or one link; below it no time is a finite float
MIN_LINK_GBPS = MIN_GBPS            # one link's own bandwidth (an edge that prices its link)
MAX_GBPS = 1e6                      # 1 Pbit/s
MAX_ALPHA_US = 1e6                  # 1 s per step
Bytes = Annotated[int, Field(ge=1, le=MAX_BYTES)]
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT)]
HostId = Annotated[str, Field(min_length=1, max_length=100)]
RuntimeName = Literal["executor", "rccl", "legacy", "oneccl"]


class Input(BaseModel):
    """A request body: unknown fields are errors, numbers are finite (no NaN or Infinity), and types are strict
    (pydantic strict mode): `true` is not the number 1, "16" is not 16, 1.0 is not an integer."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class Parallelism(Input):
    """How the job is parallelised. The simulator models the paper's setting (section 8.3): every node holds a
    data-parallel replica and allreduces its gradients, and MoE layers shard their experts over all nodes
    (an all-to-all of every node); other degrees are refused rather than simulated wrongly."""

    data: int | None = Field(default=None, strict=True, ge=1, le=MAX_PLAN_NODES, description="data-parallel "
                             "degree: the plan's nodes")
    expert: int | None = Field(default=None, strict=True, ge=1, le=MAX_PLAN_NODES, description="expert-parallel "
                               "degree of the MoE layers: the plan's nodes (models with MoE layers only)")


class TrainingWorkload(Input):
    """A training job: the plan simulates one iteration on every frontier topology and baseline and picks the
    topology with the smallest iteration time (`fabricplan train`; README "Training jobs")."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "switch-base-128", "device": "a100"}, {
        "model_spec": {"name": "tiny", "layers": [
            {"name": "fc", "params_bytes": 4096, "forward_s": 0.001, "backward_s": 0.002},
            {"name": "moe", "params_bytes": 512, "forward_s": 0.001, "backward_s": 0.002,
             "moe_tokens_bytes": 1048576}], "buckets_bytes": [1048576]}}]})

    model: CatalogModelName | None = Field(default=None, description="a catalogued model (published shapes, "
                                           "services/synthesis/evaluate/model_catalog.py), built for the plan's "
                                           "nodes; give this or model_spec")
    model_spec: ModelSpec | None = Field(default=None, description="an inline model description, the file "
                                         f"form of `fabricplan train --model FILE` (at most {MAX_PLAN_LAYERS} "
                                         "layers)")
    batch: int | None = Field(default=None, strict=True, ge=1, le=1 << 20, description="samples per node "
                              "(catalogued models; default the model's)")
    device: DeviceName | DeviceProfile | None = Field(default=None, description="the device profile turning a "
                                                      "catalogued model's FLOPs into seconds (default a100); an "
                                                      "inline model names its own inside model_spec")
    buckets_bytes: list[Bytes] | None = Field(default=None, min_length=1, max_length=MAX_BUCKETS, description=(
        "DDP bucket capacities to try (default the model's: 1, 10, 100, 1024 MiB); the best is chosen per "
        "topology"))
    parallelism: Parallelism | None = None
    alltoall_cost: Literal["mcf", "schedule"] = Field(default="mcf", description="how an MoE all-to-all is "
                                                      "priced on every entry: the MCF throughput (LP (3)), or a "
                                                      "verified all-to-all schedule of each topology (slower)")
    # hybrid parallelism on multi-GPU hosts (docs/training.md; `fabricplan train --gpus-per-host`)
    gpus_per_host: int = Field(default=1, strict=True, ge=1, le=64, description="GPUs per host (the plan's nodes "
                               "are hosts, its degree their NICs); above 1, or with strategy, global_batch or a "
                               "transformer model, the plan runs the hybrid-parallel model (TP, PP, DP with ZeRO, "
                               "EP) and chooses topology and strategy together")
    global_batch: int | None = Field(default=None, strict=True, ge=1, le=1 << 24, description="sequences per "
                                     "iteration (hybrid; default the catalogued model's)")
    strategy: str | None = Field(default=None, min_length=1, max_length=200, description="'auto' (default: "
                                 "searched) or tp=8,pp=8,dp=16[,ep=..][,zero=..][,mb=..][,vp=..][,recompute=..] "
                                 "(given keys fixed, the rest searched); hybrid")
    transformer_spec: TransformerModelFile | None = Field(default=None, description="an inline transformer by "
                                                          "its hyperparameters, the file form of `fabricplan "
                                                          "train --model FILE` {name, transformer, global_batch?}")

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, v):
        if v is not None and v.lower() != "auto":
            from services.synthesis.evaluate.parallelism import parse_parallelism

            parse_parallelism(v)
        return v

    @model_validator(mode="after")
    def _one_model(self):
        given = [self.model is not None, self.model_spec is not None, self.transformer_spec is not None]
        if sum(given) != 1:
            raise ValueError("give one of model (a catalogued name), model_spec (an inline per-layer description) "
                             "or transformer_spec (an inline transformer)")
        if self.model_spec is not None:
            if len(self.model_spec.layers) > MAX_PLAN_LAYERS:
                raise ValueError(f"model_spec has {len(self.model_spec.layers)} layers; a plan takes at most "
                                 f"{MAX_PLAN_LAYERS}")
            for name in ("batch", "device"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} applies to catalogued models; an inline model gives its compute per "
                                     "layer (and its device inside model_spec)")
        return self


class Workload(Input):
    collective: CollectiveName | None = Field(default=None, description="one collective kind")
    collectives: list[CollectiveName] | None = Field(default=None, min_length=1, max_length=3,
                                                     description="several kinds")
    sizes_bytes: list[Bytes] | None = Field(default=None, min_length=1, max_length=1000, description=(
        "message sizes in bytes (1 to 2^50): the sizes form (give sizes_bytes or training)"))
    weights: list[Weight] | None = Field(default=None, max_length=1000, description="one weight per size, "
                                         f"0 to {MAX_WEIGHT:g}")
    alltoall_bytes: Bytes | None = Field(default=None, description="bytes each node holds for an "
                                         "all-to-all (it sends 1/N of them to every node)")
    alltoall_weight: Weight = Field(default=0.0, description="all-to-alls per unit of the weights above "
                                    "(the all-to-all share of the workload)")
    training: TrainingWorkload | None = Field(default=None, description="a training job instead of message "
                                              "sizes (the training form: give sizes_bytes or training)")

    @model_validator(mode="after")
    def _consistent(self):
        if self.training is not None:
            given = [k for k in ("collective", "collectives", "sizes_bytes", "weights", "alltoall_bytes")
                     if getattr(self, k) is not None] + (["alltoall_weight"] if self.alltoall_weight else [])
            if given:
                raise ValueError(f"a training workload takes its collectives from the model; leave out "
                                 f"{', '.join(given)}")
            return self
        if self.sizes_bytes is None:
            raise ValueError("give sizes_bytes (message sizes) or training (a training job)")
        if self.collective is None and not self.collectives:
            self.collective = "allreduce"
        if self.weights is not None and len(self.weights) != len(self.sizes_bytes):
            raise ValueError(f"weights has {len(self.weights)} entries but sizes_bytes has {len(self.sizes_bytes)}")
        if self.alltoall_weight > 0 and self.alltoall_bytes is None:
            raise ValueError("an all-to-all share (alltoall_weight) needs alltoall_bytes")
        return self


class PlanRequest(Input):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "job_id": "j1", "nodes": 16, "degree": 4, "alpha_us": 10, "bandwidth_gbps": 100,
        "workload": {"collective": "allreduce", "sizes_bytes": [1048576, 104857600]}}]})

    job_id: str = Field(min_length=1, max_length=200)
    nodes: int = Field(strict=True, ge=2, le=MAX_PLAN_NODES, description=f"number of hosts N (at most "
                       f"{MAX_PLAN_NODES}: the largest plan measured to fit the default task memory and time limits)")
    degree: int = Field(strict=True, ge=1, le=16, description="ports per host d")
    alpha_us: float = Field(ge=0, le=MAX_ALPHA_US, description="per-step latency alpha in microseconds")
    bandwidth_gbps: float = Field(ge=MIN_GBPS, le=MAX_GBPS, description="a host's total egress bandwidth B in "
                                  "Gbit/s")
    bidirectional_only: bool = Field(default=False, description="only topologies duplex cables can realise")
    workload: Workload
    fabric_id: str | None = Field(default=None, min_length=1, max_length=100,
                                  description="bind the plan to this fabric")
    hosts: list[HostId] | None = Field(default=None, max_length=MAX_PLAN_NODES, description="the fabric hosts to use "
                                       "(default: the first free ones); one per node")
    runtimes: list[RuntimeName] | None = Field(default=None, min_length=1, max_length=4, description=(
        "runtimes whose XML the plan compiles with their default options (docs/runtimes.md): executor "
        "(msccl-executor-nccl), rccl, legacy (microsoft/msccl), oneccl (CPU); default [\"executor\"]"))
    lookahead: bool = Field(default=False, description="provision the job on the look-ahead plane of its hosts "
                            "(TopoOpt App. C: they may still run another job); POST /v1/plans/{id}/activate flips "
                            "their 1x2 switches once they are free. Needs a fabric with look-ahead planes")

    @model_validator(mode="after")
    def _hosts(self):
        if self.runtimes is not None and len(set(self.runtimes)) != len(self.runtimes):
            raise ValueError("runtimes must not repeat a runtime")
        if self.lookahead and self.fabric_id is None:
            raise ValueError("lookahead provisions a job on a fabric: it needs a fabric_id")
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


class SizeRangeOut(BaseModel):
    """One range of a schedule set: sizes [min_bytes, max_bytes) (max_bytes null: unbounded) served by the
    verified schedule of `scheduler` (issue 26), fetched at `url`."""

    min_bytes: int
    max_bytes: int | None
    scheduler: str
    steps: int
    tau: float
    tau_exact: str
    verified: bool
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


class CollectiveCostOut(BaseModel):
    """(steps, tau) measured from a verified schedule: T = steps * alpha + tau * S/B."""

    steps: int
    tau: float
    tau_exact: str


class TrainingEntryOut(BaseModel):
    """One topology's simulated iteration with its best DDP bucket (services.synthesis.evaluate.iteration)."""

    kind: Literal["frontier", "baseline"]
    name: str = Field(description="the expression (frontier) or the baseline's name")
    expr: str
    iteration_s: float
    compute_s: float
    exposed_allreduce_s: float = Field(description="time compute waits behind allreduces or for the last ones")
    alltoall_s: float = Field(description="the MoE all-to-alls' time (compute waits for each)")
    allreduce_busy_s: float = Field(description="the stream's time on allreduces, overlapped or not")
    bucket_bytes: int = Field(description="the DDP bucket capacity with the smallest iteration time")
    lower_bound_s: float = Field(description="the iteration's lower bound at this topology's own costs")
    allreduce: CollectiveCostOut = Field(description="the allreduce (reduce-scatter + allgather) cost")
    alltoall: dict = Field(description="the all-to-all cost: {} for a model without MoE layers, else source "
                           "(mcf or schedule), throughput f, and the schedule's steps and tau when one was built")


class AllToAllTimes(BaseModel):
    schedule_us: float = Field(description="steps * alpha + tau * D/B of the verified schedule")
    mcf_bound_us: float = Field(description="(D/N) / (f B/d): the MCF throughput's bandwidth-only time")


class IterationOut(BaseModel):
    iteration_s: float
    compute_s: float
    exposed_allreduce_s: float
    alltoall_s: float
    allreduce_s: float
    bucket_bytes: int
    allreduces: int
    alltoalls: int


class HybridEntryOut(BaseModel):
    """One topology with its fastest strategy (`fabricplan train --gpus-per-host G --json`'s entries)."""

    kind: Literal["frontier", "topology", "baseline"]
    name: str
    expr: str
    iteration_s: float | None = Field(description="null when no strategy fits (see refused)")
    refused: str | None = None
    achieved_tflops_per_gpu: float | None = Field(default=None, description="model FLOPs per iteration / "
                                                  "iteration time / GPUs (as Megatron-LM reports it)")
    mfu: float | None = None
    parallelism: dict | None = Field(default=None, description="tp, pp, dp, ep, zero, micro_batch, interleave, "
                                     "recompute")
    breakdown: dict | None = Field(default=None, description="compute_s, bubble_s, exposed_tp_s, exposed_pp_s, "
                                   "exposed_dp_s, exposed_ep_s")
    memory_per_gpu_bytes: dict | None = None
    traffic_per_gpu_bytes: dict | None = None
    strategies_searched: int | None = None
    strategies_refused: dict | None = None

    model_config = ConfigDict(extra="allow")


class HybridTrainingOut(BaseModel):
    """The hybrid-parallel training job on every frontier topology and baseline (docs/training.md)."""

    model: str
    hosts: int
    gpus_per_host: int
    gpus: int
    nics_per_host: int
    device: str
    precision: str
    global_batch: int
    parameters: int
    model_flops_per_iteration: float
    device_efficiency: float
    entries: list[HybridEntryOut]
    best: str | None
    best_iteration_s: float | None
    why: str


class TrainingOut(BaseModel):
    """The training job on every frontier topology and baseline (`fabricplan train --json`'s shape)."""

    model: str
    nodes: int
    degree: int
    layers: int
    moe_layers: int
    gradient_bytes: int
    buckets_bytes: list[int] = Field(description="the bucket capacities tried")
    alltoall_cost: Literal["mcf", "schedule"]
    entries: list[TrainingEntryOut] = Field(description="frontier entries, then the baselines that exist for "
                                            "(N, d)")
    best: str | None = Field(description="the frontier entry with the smallest iteration time (the chosen one)")
    best_iteration_s: float | None
    lower_bound_s: float = Field(description="no N-node degree-d topology runs the iteration faster: compute "
                                 "plus the all-to-alls at the Moore throughput bound, or those plus one allreduce "
                                 "of all gradients at the reduce-scatter + allgather optimum")
    chosen_with_alltoall_schedule: IterationOut | None = Field(default=None, description=(
        "the chosen topology's iteration with its all-to-all priced by the plan's verified all-to-all schedule"))


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


class RevisionAllToAllTimes(AllToAllTimes):
    schedule_us: float | None = Field(default=None, description="steps * alpha + tau * D/B of the verified "
                                      "schedule (none when the revision has no schedule: approximate)")
    mcf_bound_us: float = Field(description="(D/N) / (f B/d): the MCF throughput's bandwidth-only time (approximate:"
                                " at the bracket's lower end f = mcf_lower, the time charged)")
    mcf_bound_low_us: float | None = Field(default=None, description="approximate: the same at the bracket's upper "
                                           "end f = mcf_upper")


class RevisionAllToAllOut(AllToAllOut):
    """A revision's all-to-all on its degraded topology: the schedule as the plan builds it (built), or, when its
    LP is beyond the library's limits, the LP (3) throughput bracket charged at its lower end (approximate)."""

    status: Literal["built", "refused", "approximate"]
    mcf_lower: float | None = Field(default=None, description="approximate: the certified bracket of LP (3)'s f")
    mcf_upper: float | None = None
    mcf_exact: bool | None = None
    mcf_method: str | None = Field(default=None, description="approximate: how f was computed (lp, lp-symmetric, "
                                   "colgen)")
    times_us: dict[str, RevisionAllToAllTimes] = Field(default_factory=dict, description="per all-to-all size (bytes "
                                                       "per node): the schedule's time and the MCF bound")


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


class Progress(BaseModel):
    fraction: float = Field(description="the share of the expected running time spent: stages weighted by their "
                            "measured costs in N and the number of files compiled")
    stage: str
    eta_s: float | None = Field(default=None, description="while running: seconds left, elapsed (1 - p) / p")


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
    predicted_time_us: dict[str, dict[str, float]] | None = None
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


class CompileAccepted(BaseModel):
    """A compile was queued (or is running): poll `url` until it answers 200 (the file) or 422 (refused)."""

    status: Literal["queued", "running"]
    collective: str
    format: str
    runtime: str
    options: str
    url: str


class FrontierOut(BaseModel):
    nodes: int
    degree: int
    bidirectional: bool
    collective: CollectiveName = "allgather"
    cached: bool
    bound: dict
    entries: list[FrontierEntry]


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
        out_deg: dict[int, int] = {}
        in_deg: dict[int, int] = {}
        for i, e in enumerate(edges):
            if e.tail == e.head:
                raise PydanticCustomError("self_loop", "edge {i} [{node}, {node}] is a self-loop: it takes one of "
                                          "the node's ports and carries nothing; leave it out",
                                          {"i": i, "node": e.tail})
            for deg, node, which in ((out_deg, e.tail, "out"), (in_deg, e.head, "in")):
                deg[node] = deg.get(node, 0) + 1
                if deg[node] > BFB_MAX_DEGREE:
                    raise PydanticCustomError("degree", "node {node} has more than {limit} {which}-arcs (edge {i} is "
                                              "one too many): BFB schedules take nodes of degree at most {limit}",
                                              {"node": node, "limit": BFB_MAX_DEGREE, "which": which, "i": i})
        return edges


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


class PanelOut(BaseModel):
    """A panel's desired configuration against what its agent last reported."""

    id: str
    fabric_id: str
    kind: str
    ports: int
    version: int = Field(description="the latest config version")
    version_reason: str
    version_at: datetime
    applied_version: int = Field(description="the version the agent last reported applied (0: none yet)")
    in_sync: bool = Field(description="applied_version == version and the last report did not fail")
    status: str | None = Field(description="the last report's status (applied, failed); null before any")
    message: str | None
    reported_at: datetime | None
    cross_connects: int = Field(description="cross-connects in the latest version")
    pending_add: int = Field(description="cross-connects the latest version adds to what the agent reported")
    pending_remove: int = Field(description="reported cross-connects the latest version no longer has")
    plans: dict[str, int] = Field(description="active plans using this panel -> the version carrying their "
                                              "cross-connects")


class HealthOut(BaseModel):
    status: Literal["ok"]
    api_keys_required: bool = Field(description="clients (the dashboard) ask for a key before they call")


class ReadyOut(BaseModel):
    status: Literal["ready", "not ready"]
    checks: dict[str, str] = Field(description="database and broker: ok, embedded, or error: <exception>")


class StatsOut(BaseModel):
    plans: dict[str, int] = Field(description="plans by status (also the fabricplan_plans gauge)")
    jobs: dict[str, dict[str, int]] = Field(description="unfinished jobs by kind (plan, evaluation, revision, "
                                            "compile) and status (queued, running); also the fabricplan_jobs gauge")
    queue_depth: int = Field(description="jobs of every kind accepted and not yet started by a worker (status "
                             "queued)")
    fabrics: int
    panels: int
    panels_out_of_sync: int = Field(description="panels whose agent has not applied the latest version")


class EvaluationOut(BaseModel):
    id: str
    url: str = Field(description="this evaluation's URL")
    status: Literal["queued", "running", "done", "failed"]
    expr: str
    collective: str
    reason: str | None = None
    result: EvaluateOut | None = None


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="where: body, query, path or header, then the field's path")
    field: str = Field(description="the field's path joined by dots ('' for the whole body)")
    msg: str
    type: str


class Problem(BaseModel):
    """Every error (RFC 9457 problem details, served as application/problem+json; services.api.errors)."""

    type: str = Field(description="what kind of problem: urn:fabricplan:problem:<kind> (a field error's type, or "
                      "the status's kind: not-found, conflict, too-many-jobs, unavailable, ...)")
    title: str = Field(description="the HTTP status's phrase")
    status: int = Field(description="the HTTP status code")
    detail: str = Field(description="what happened, for a person")
    instance: str | None = Field(default=None, description="the request's path")
    field: str | None = Field(default=None, description="the field at fault (the first of `errors`), dotted")
    reason: str = Field(description="why: the first field error's message, else the detail")
    errors: list[FieldError] = Field(default_factory=list, description="every field at fault (400, 413, 415, 422)")


ErrorOut = ValidationErrorOut = Problem        # the names the routes' response declarations use


Ident = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
MAX_FABRIC_HOSTS = 16384
MAX_FABRIC_HOST_PORTS = 1 << 16


class PanelProfileIn(Input):
    """Overrides of the kind's device profile (services.fabric.devices; defaults from TopoOpt Table 1)."""

    model: str | None = Field(default=None, min_length=1, max_length=200)
    max_ports: int | None = Field(default=None, strict=True, ge=1, le=1 << 20)
    reconfiguration_s: float | None = Field(default=None, ge=0, le=7 * 86400, description="one reconfiguration "
                                            "(a robot batch on a patch panel)")
    robot_batch_size: int | None = Field(default=None, strict=True, ge=1, le=1 << 20, description="patch panels: "
                                         "cross-connect changes per reconfiguration_s")
    insertion_loss_db: float | None = Field(default=None, ge=0, le=100)
    insertion_loss_max_db: float | None = Field(default=None, ge=0, le=100)
    cost_per_port_usd: float | None = Field(default=None, ge=0, le=1e9)


class FabricLayout(Input):
    """Shortcut for the common cablings: `planes` (host port k on panel plane{k}, port = host index) or
    `shared` (every host port on one panel); `lookahead` adds the second side of a 1x2 switch per host port
    (planes: panels {prefix}{k}-alt, 2d in all; shared: the panel's second half)."""

    id: Ident
    layout: Literal["planes", "shared"]
    hosts: Annotated[int, Field(strict=True, ge=1, le=MAX_FABRIC_HOSTS)] | Annotated[
        list[HostId], Field(min_length=1, max_length=MAX_FABRIC_HOSTS)] = Field(
        description=f"a host count, or the host ids (at most {MAX_FABRIC_HOSTS})")
    ports_per_host: int = Field(strict=True, ge=1, le=64)
    kind: Literal["patch_panel", "ocs"] = "patch_panel"
    panel_prefix: str | None = Field(default=None, max_length=50, pattern=r"^[A-Za-z0-9_.-]+$")
    lookahead: bool = Field(default=False, description="active and look-ahead planes (TopoOpt App. C)")
    profile: PanelProfileIn | None = Field(default=None, description="overrides of every panel's device profile "
                                           "(a panel may have at most the profile's max_ports ports: a planes "
                                           "panel has one per host, the shared panel one per host port)")

    @model_validator(mode="after")
    def _bounded(self):
        count = self.hosts if isinstance(self.hosts, int) else len(self.hosts)
        if count * self.ports_per_host > MAX_FABRIC_HOST_PORTS:
            raise ValueError(f"{count} hosts x {self.ports_per_host} ports is {count * self.ports_per_host} host "
                             f"ports; a fabric has at most {MAX_FABRIC_HOST_PORTS}")
        return self


class FiberIn(Input):
    panel: Ident
    port: int = Field(strict=True, ge=0, lt=MAX_PANEL_PORTS)


class AltFibersIn(Input):
    """The second side of the host port's 1x2 switch (its look-ahead plane when the first side is active)."""

    tx: FiberIn
    rx: FiberIn


class HostPortIn(Input):
    port: int | None = Field(default=None, strict=True, ge=0, le=63)
    tx: FiberIn
    rx: FiberIn
    alt: AltFibersIn | None = Field(default=None, description="look-ahead planes: every host port has one or none does")


class HostIn(Input):
    id: HostId
    ports: list[HostPortIn] = Field(min_length=1, max_length=64)


class PanelIn(Input):
    id: Ident
    kind: Literal["patch_panel", "ocs"]
    ports: int = Field(strict=True, ge=1, le=MAX_PANEL_PORTS, description="at most its device profile's max_ports "
                       "(patch_panel 1008, ocs 384, or the profile override's)")
    profile: PanelProfileIn | None = None


class FabricDocument(Input):
    """The full fabric: panels, and every host port's tx and rx fiber with the panel port it lands on."""

    id: Ident = "fabric"
    ports_per_host: int | None = Field(default=None, strict=True, ge=1, le=64)
    panels: list[PanelIn] = Field(min_length=1, max_length=1024)
    hosts: list[HostIn] = Field(min_length=1, max_length=MAX_FABRIC_HOSTS)

    @model_validator(mode="after")
    def _bounded(self):
        total = sum(len(h.ports) for h in self.hosts)
        if total > MAX_FABRIC_HOST_PORTS:
            raise ValueError(f"{total} host ports; a fabric has at most {MAX_FABRIC_HOST_PORTS}")
        return self


class FabricSummary(BaseModel):
    id: str
    hosts: int
    ports_per_host: int
    panels: list[dict] = Field(description="id, kind, ports, the latest config version and the device profile")
    reserved: dict[str, str] = Field(description="host id -> the plan holding it (its active plane)")
    lookahead: bool = Field(default=False, description="the hosts' ports have 1x2 switches (active and look-ahead "
                                                       "planes)")
    active_sides: dict[str, int] = Field(default_factory=dict, description="hosts whose 1x2 switches point at side "
                                         "1 (every other host: side 0)")
    lookahead_reserved: dict[str, str] = Field(default_factory=dict, description="host id -> the plan provisioned "
                                               "on its look-ahead plane")
    spec: dict | None = Field(default=None, description="the fabric document (GET /v1/fabrics/{id} only)")


class CrossConnectIn(BaseModel):
    """One cross-connect on the panel; other keys (the config's tx_host, plan_id, ...) are ignored."""

    model_config = ConfigDict(extra="ignore")

    ingress: int = Field(strict=True, ge=0, lt=MAX_PANEL_PORTS)
    egress: int = Field(strict=True, ge=0, lt=MAX_PANEL_PORTS)


class FailedConnectionIn(Input):
    """A failed cross-connect {ingress, egress}, or a failed port: only its ingress or only its egress."""

    ingress: int | None = Field(default=None, strict=True, ge=0, lt=MAX_PANEL_PORTS)
    egress: int | None = Field(default=None, strict=True, ge=0, lt=MAX_PANEL_PORTS)

    @model_validator(mode="after")
    def _one(self):
        if self.ingress is None and self.egress is None:
            raise ValueError("name the failed cross-connect's ingress and egress, or one failed port")
        return self


class PanelStateIn(Input):
    applied_version: int = Field(strict=True, ge=0, le=INT32_MAX, description="the config version the agent "
                                 "applied (status applied or degraded) or tried to apply (status failed)")
    status: Literal["applied", "failed", "degraded"] = Field(description="degraded: the version is applied but the "
                                                             "cross-connects in `failed` carry no light")
    message: str | None = Field(default=None, max_length=2000)
    sequence: int | None = Field(default=None, strict=True, ge=0, le=2 ** 63 - 1, description=(
        "the agent's report counter, increasing with every report it sends (kept across restarts, or the time "
        "in ms): a report of the same version whose sequence is not above the stored one's is a replay (409, "
        "nothing stored). Without it, reports of one version count in the order they arrive"))
    connections: list[CrossConnectIn] | None = Field(default=None, max_length=MAX_PANEL_PORTS, description=(
        "the cross-connects now on the panel, [{ingress, egress}], each port in range and used once; with "
        "status applied or degraded they must be exactly the acknowledged version's (omitted: they are)"))
    failed: list[FailedConnectionIn] | None = Field(default=None, max_length=MAX_PANEL_PORTS, description=(
        "status degraded: the cross-connects of the version that failed, or single failed ports; each plan they "
        "carry gets a new revision"))

    @model_validator(mode="after")
    def _failed(self):
        if (self.status == "degraded") != bool(self.failed):
            raise ValueError("status degraded needs the failed connections, and only status degraded has them")
        return self


class LinkRef(Input):
    arc: str = Field(max_length=32, pattern=r"^\s*\d{1,7}\s*>\s*\d{1,7}\s*$", description="tail>head, an arc of "
                     "the plan's topology")
    lane: int | None = Field(default=None, strict=True, ge=0, le=63, description="one of parallel arcs (default: "
                             "the highest not failed yet)")


class FailureReport(Input):
    model_config = ConfigDict(json_schema_extra={"examples": [{"links": [{"arc": "0>1"}], "repair": True}]})

    links: list[LinkRef] = Field(min_length=1, max_length=1024, description="the failed links")
    repair: bool = Field(default=True, description="re-patch around the failure when the hosts have spare ports "
                         "on a panel or OCS; the plan returns to its full topology once the panels apply it")
    message: str | None = Field(default=None, max_length=2000)


class RevisionAccepted(BaseModel):
    plan_id: str
    number: int
    status: str
    url: str


class RevisionSummary(BaseModel):
    number: int = Field(description="0: the plan as made; each failure report or applied repair adds one")
    kind: Literal["original", "failure", "restored"]
    status: PlanStatus
    current: bool = Field(description="the highest-numbered done revision: what the scheduler should run")
    created_at: datetime
    expr: str | None = Field(description="the revision's topology")
    failed: list[str] = Field(description="links failed in this revision (tail>head)")
    workload_slowdown: float | None = Field(default=None, description="failure revisions: the workload's "
                                            "predicted time against revision 0's; null for the original and for a "
                                            "restored revision (no failure: it runs at revision 0's time)")
    restores: int | None = Field(default=None, description="a restored revision: the failure revision whose "
                                 "repair it completes (back on the full topology); null otherwise")
    url: str


class RevisionOut(RevisionSummary):
    plan_id: str
    progress: Progress
    reason: str | None = None
    updated_at: datetime
    cause: dict | None = Field(description="what made it: source (scheduler, panel, repair), the links reported "
                               "with where they are cabled, the panel and version")
    failed_links: list[dict]
    repair_requested: bool
    repair: dict | None = Field(description="the re-patch: pending (panels and versions to apply, moved arcs, "
                                "ready_estimate_s), applied (the restored revision), impossible (why), ...")
    topology: dict | None = None
    schedules: dict | None = Field(default=None, description="per collective: steps, tau, verified, the scheduler "
                                   "served and every candidate, url (the all-to-all: steps, tau, verified, url)")
    compiled: dict[str, dict[str, dict]] | None = Field(default=None, description=(
        "runtime -> collective -> the revision's XML with the runtime's default options (as the plan's `compiled`, "
        "with its size ranges' files); while the revision runs, each file's status so far"))
    compile_failed: list[dict] | None = Field(default=None, description="as the plan's: the files that failed "
                                              "or were refused, with the reason")
    compile_pending: list[str] | None = Field(default=None, description=(
        "while the revision runs: the files (`runtime:collective`, `runtime:collective@i` for size range i) its "
        "worker has still to compile; its verified "
        "schedules (npz, JSON) are served as soon as they are stored, before the XML"))
    predicted_time_us: dict[str, dict[str, float]] | None = None
    workload_time_us: float | None = None
    alltoall: RevisionAllToAllOut | None = Field(default=None, description="when the workload has an all-to-all: "
                                                 "re-planned on the revision's topology")
    restore_gain: dict | None = Field(default=None, description="a restored revision: its times against the "
                                      "failure revision it ends (before: that revision, after: the full topology)")
    failure_cost: dict | None = Field(default=None, description="failure revisions (null for a restored one): "
                                      "before/after per collective and size and for the "
                                      "workload, the naive fallback (a ring over surviving links), the "
                                      "all-to-all's per size (`alltoall`), and for a training plan the iteration "
                                      "on the revision's topology (`training`: iteration_s, iteration_s_before, "
                                      "slowdown, bucket_bytes, allreduce, alltoall, ...)")
    build: dict | None = Field(default=None, description="failure revisions: `schedules_s` building and checking "
                               "the schedules, `compile_s` compiling their XML, `cpu_s` the worker's CPU seconds "
                               "for the whole revision")
    links: dict[str, str]


class ActivationOut(BaseModel):
    plan_id: str
    fabric_id: str
    side: int = Field(description="the side of the 1x2 switches now active on the plan's hosts")
    switches: dict[str, int] = Field(description="host id -> the switch position to set")


class FabricCostOut(BaseModel):
    link_gbps: float
    price_row_gbps: int = Field(description="the row of TopoOpt Table 2 used")
    lanes: int = Field(description="100 Gbps lanes per link above 200 Gbps (else 1)")
    fiber_m: float
    items: list[dict] = Field(description="item, count, unit_usd, usd")
    total_usd: float
    per_host_usd: float
    sources: list[str]
