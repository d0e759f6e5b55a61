"""A training plan's results (DESIGN 4.10; the paper's section 8.3): the iteration on every frontier entry
and baseline (`fabricplan train --json`'s shape), one GPU per node or hybrid parallelism on multi-GPU hosts.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


from .common import CollectiveCostOut

__all__ = ["HybridEntryOut", "HybridTrainingOut", "IterationOut", "TrainingEntryOut", "TrainingOut"]


class TrainingEntryOut(BaseModel):
    """One topology's simulated iteration with its best DDP bucket (services.synthesis.evaluate.iteration)."""

    kind: Literal["frontier", "baseline", "topoopt"] = Field(description="a frontier entry, a baseline, or "
                                                             "TopoOpt's co-optimised topology (the request's "
                                                             "topology strategy topoopt)")
    name: str = Field(description="the expression (frontier), the baseline's name, or topoopt")
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
                                     "recompute, cp, sp, moe_overlap, moe_dispatch, etp")
    breakdown: dict | None = Field(default=None, description="compute_s, bubble_s, exposed_tp_s, exposed_pp_s, "
                                   "exposed_dp_s, exposed_ep_s, exposed_cp_s, exposed_host_s")
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
    best: str | None = Field(description="the chosen topology: the frontier entry with the smallest iteration "
                             "time, or TopoOpt's (topology strategy topoopt)")
    best_iteration_s: float | None
    lower_bound_s: float = Field(description="no N-node degree-d topology runs the iteration faster: compute "
                                 "plus the all-to-alls at the Moore throughput bound, or those plus one allreduce "
                                 "of all gradients at the reduce-scatter + allgather optimum")
    chosen_with_alltoall_schedule: IterationOut | None = Field(default=None, description=(
        "the chosen topology's iteration with its all-to-all priced by the plan's verified all-to-all schedule"))
