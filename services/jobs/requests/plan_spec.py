"""A plan's request, typed (DESIGN 4.16): `PlanSpec`, its `Workload` (message sizes, or a `TrainingWorkload`)
and their bounds. The API's POST /v1/plans body is this model (services.api.schemas.plans.PlanRequest); the
database keeps `dump()`; every stage `load`s it back once and passes the object on.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from services.compiler.runtimes.names import DEFAULT_RUNTIME, Runtime
from services.synthesis.evaluate.devices import GPU_PROFILES
from services.synthesis.evaluate.model_catalog import catalog_names
from services.synthesis.evaluate.moe import HOST_EXPERT_S
from services.synthesis.evaluate.training_job import DEVICES, MAX_BUCKETS, DeviceProfile, ModelSpec
from services.synthesis.evaluate.transformer import LLM_CATALOG, TransformerModelFile
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective
from services.synthesis.search.finder import WorkloadItem

from services.jobs.requests.bounds import (MAX_ALPHA_US, MAX_GBPS, MAX_WEIGHT, MIN_GBPS, Bytes, CollectiveName,
                                           HostId, Input, RuntimeName, Weight)

__all__ = ["CatalogModelName", "DeviceName", "MAX_PLAN_LAYERS", "MAX_PLAN_NODES", "Parallelism", "PlanSpec",
           "TopologyChoice", "TrainingWorkload", "Workload"]

CatalogModelName = Literal[tuple(dict.fromkeys([*catalog_names(), *LLM_CATALOG]))]
DeviceName = Literal[tuple(dict.fromkeys([*DEVICES, *GPU_PROFILES]))]
MAX_PLAN_NODES = 2048              # the largest plan that fits the default task limits (4096 MiB, 1800 s): see
                                  # README "Limits" (N = 4096 at d = 4, 8, 16 ran out of memory in 'schedules')
MAX_PLAN_LAYERS = 10_000            # layers of an inline model: the simulation is O(layers x buckets x topologies)


class Parallelism(Input):
    """How the job is parallelised. The simulator models the paper's setting (section 8.3): every node holds a
    data-parallel replica and allreduces its gradients, and MoE layers shard their experts over expert-parallel
    groups (all nodes by default; a divisor of the nodes makes the groups replicas of each other, expert-data
    parallelism); other degrees are refused rather than simulated wrongly."""

    data: int | None = Field(default=None, strict=True, ge=1, le=MAX_PLAN_NODES, description="data-parallel "
                             "degree: the plan's nodes")
    expert: int | None = Field(default=None, strict=True, ge=1, le=MAX_PLAN_NODES, description="expert-parallel "
                               "degree of the MoE layers: a divisor of the plan's nodes (default: all of them, or "
                               "for a catalogued model with fewer experts than nodes gcd(nodes, experts)); the "
                               "groups replicate the experts and allreduce their gradients (models with MoE "
                               "layers only)")


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
                                 "searched) or tp=8,pp=8,dp=16[,ep=..][,zero=..][,mb=..][,vp=..][,recompute=..]"
                                 "[,overlap=..][,dispatch=..] (given keys fixed, the rest searched); hybrid")
    zero3_efficiency: float | None = Field(default=None, gt=0, le=1, description="the fraction of the "
                                           "schedules' collective bandwidth ZeRO-3's collectives reach (hybrid; "
                                           "default 0.1248, solved from DeepSpeed ZeRO-3 in Narayanan et al. "
                                           "SC'21 Table 2; 1.0 prices an implementation at the schedules' rate)")
    moe_host_us: float | None = Field(default=None, ge=0, le=10000, allow_inf_nan=False, description="host "
                                      "time in microseconds per local expert and grouped-GEMM call that the GPU "
                                      f"waits for in a dropless MoE layer (hybrid; default {HOST_EXPERT_S * 1e6:.2f}, "
                                      "solved from a published Megatron-Core run; 0 prices a CUDA-graphed or "
                                      "sync-free stack)")
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

    @property
    def kinds(self) -> list[Collective]:
        """The sizes form's collective kinds (`collective`, or `collectives`)."""
        return [Collective(k) for k in (self.collectives or [self.collective or Collective.ALLREDUCE.value])]

    @property
    def sizes_items(self) -> list[WorkloadItem]:
        """The sizes form's collectives with their sizes and weights, what selection prices (equation (1))."""
        weights = self.weights or [1.0] * len(self.sizes_bytes or [])
        return [WorkloadItem(k, float(sz), float(wt)) for k in self.kinds
                for sz, wt in zip(self.sizes_bytes or [], weights)]


class TopologyChoice(Input):
    """How the plan's topology is chosen. `finder` (the default): the frontier entry with the smallest workload
    time (the core paper's section 5.4, or the training job's iteration, section 8.3). `topoopt`: TopoOpt's
    co-optimised topology (Wang et al., NSDI'23, section 4 and Algorithm 1: the degree split between AllReduce
    rings and model-parallel matchings by the job's traffic, host-forwarded MP routes, App. I), for a training
    job with model-parallel traffic (DLRM's embedding tables, MoE experts); its schedules are built and
    model-checked like a frontier entry's, and the plan reports its iteration beside the finder's best."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"strategy": "topoopt"}]})

    strategy: Literal["finder", "topoopt"] = Field(default="finder", description="finder (the frontier's fastest "
                                                   "entry) or topoopt (TopoOpt's TopologyFinder, for a training "
                                                   "workload with model-parallel layers; not hybrid)")


class PlanSpec(Input):
    """A plan's request, typed: built once from the body at the route (the API's PlanRequest is this model),
    stored as JSON (`dump`), and loaded back once by each stage (`load`), which passes the object on. Its
    link model (`link`, the paper's alpha-beta model: T = steps alpha + tau M/B), its workload's collectives
    (`workload.sizes_items`) and its runtimes (`runtime_list`) are objects, not names."""

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
    hosts: list[HostId] | None = Field(default=None, max_length=MAX_PLAN_NODES, description="the fabric hosts to use, "
                                       "one per node (default: the placement policy's choice, the plan's "
                                       "fabric.placement: fewest robot moves, then the largest free set left)")
    runtimes: list[RuntimeName] | None = Field(default=None, min_length=1, max_length=4, description=(
        "runtimes whose XML the plan compiles with their default options (docs/runtimes.md): executor "
        "(msccl-executor-nccl), rccl, legacy (microsoft/msccl), oneccl (CPU); default [\"executor\"]"))
    lookahead: bool = Field(default=False, description="provision the job on the look-ahead plane of its hosts "
                            "(TopoOpt App. C: they may still run another job); POST /v1/plans/{id}/activate flips "
                            "their 1x2 switches once they are free. Needs a fabric with look-ahead planes")
    topology: TopologyChoice | None = Field(default=None, description="how the topology is chosen (default: the "
                                            "finder's fastest frontier entry; {\"strategy\": \"topoopt\"}: TopoOpt's "
                                            "co-optimised topology for a job with model-parallel traffic)")

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

    @classmethod
    def load(cls, stored: Mapping) -> PlanSpec:
        """The request as the database holds it (JSON), validated again under the same rules."""
        return cls.model_validate_json(json.dumps(dict(stored)))

    def dump(self) -> dict:
        """The JSON the database stores (and the API shows as the plan's `request`)."""
        return self.model_dump(mode="json")

    @property
    def link(self) -> LinkModel:
        """The link model of alpha_us and bandwidth_gbps (a host's egress B over its d links)."""
        return LinkModel.from_units(self.alpha_us, self.bandwidth_gbps)

    @property
    def runtime_list(self) -> tuple[Runtime, ...]:
        """The runtimes whose XML the plan compiles (default: the executor)."""
        return tuple(Runtime(r) for r in self.runtimes) if self.runtimes else (DEFAULT_RUNTIME,)

    @property
    def training(self) -> TrainingWorkload | None:
        return self.workload.training

    @property
    def topology_strategy(self) -> str:
        """How the topology is chosen: "finder" (the default) or "topoopt" (TopologyChoice)."""
        return self.topology.strategy if self.topology is not None else "finder"
