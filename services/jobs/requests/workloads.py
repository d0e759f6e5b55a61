"""What a plan's workload asks for (DESIGN 4.10): message sizes per collective (the sizes form) or a training
job (a catalogued model built for the plan's N nodes, or an inline model description: the file form of
`fabricplan train --model FILE`), and whether it has an all-to-all component (the sizes form's
`alltoall_bytes`, or MoE layers). Plain functions of the typed request (services.jobs.requests.plan_spec
.PlanSpec), used by the API to check a request before it is accepted and by the worker's stages.
"""
from __future__ import annotations

from services.synthesis.evaluate.model_catalog import catalog_model
from services.synthesis.evaluate.training_job import (DEFAULT_BUCKETS_BYTES, ModelSpec, ModelSpecError,
                                                       parse_model_spec)
from services.synthesis.schedule.ir import Collective
from services.synthesis.search.finder import WorkloadItem

from .hybrid_workloads import check_hybrid, hybrid_alltoall_sizes, hybrid_message_sizes, is_hybrid
from .plan_spec import PlanSpec, TrainingWorkload

__all__ = ["MAX_ALLTOALL_SIZES", "TRAINING_MAX_NODES", "WorkloadInputError", "alltoall_sizes", "check_topology",
           "check_training", "has_alltoall", "is_training", "message_sizes", "training_model", "workload_items"]

TRAINING_MAX_NODES = 1024       # the paper's largest; N = 1024 evaluates in about 30 s of CPU and 1.1 GB
MAX_ALLTOALL_SIZES = 16         # distinct all-to-all sizes a plan reports times for


class WorkloadInputError(ValueError):
    """A training workload that cannot be planned; `loc` is the field's path in the plan request."""

    def __init__(self, loc: tuple, msg: str):
        self.loc, self.msg = loc, msg
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}")


def is_training(spec: PlanSpec) -> bool:
    return spec.training is not None


def _training(spec: PlanSpec) -> TrainingWorkload:
    return spec.workload.training


def training_model(spec: PlanSpec) -> ModelSpec:
    """The training job's model as the iteration simulator takes it: a catalogued model built for the plan's
    nodes (with the request's device, batch and bucket capacities), or the inline description (its bucket
    capacities replaced by the request's when given). ValueError (WorkloadInputError) names the field."""
    t = _training(spec)
    buckets = t.buckets_bytes
    expert = t.parallelism.expert if t.parallelism is not None else None
    if t.model:
        try:
            return catalog_model(t.model, spec.nodes, device=t.device or "a100", batch=t.batch,
                                 buckets_bytes=buckets or DEFAULT_BUCKETS_BYTES, expert_parallel=expert)
        except ValueError as exc:
            field = ("batch" if t.batch is not None and "batch" in str(exc) else
                     ("parallelism", "expert") if "expert_parallel" in str(exc) else "model")
            raise WorkloadInputError(("workload", "training", *((field,) if isinstance(field, str) else field)),
                                     str(exc)) from None
    model = t.model_spec.model_dump(mode="json")
    if buckets:
        model["buckets_bytes"] = buckets
    if expert is not None:
        model["expert_parallel"] = None if expert == spec.nodes else expert
    try:
        return parse_model_spec(model)
    except ModelSpecError as exc:
        raise WorkloadInputError(("workload", "training", "model_spec"), str(exc)) from None


def check_training(spec: PlanSpec) -> ModelSpec:
    """Everything about a training workload that depends on the rest of the request (the API checks it before
    accepting the plan, so the worker never meets it): N within `TRAINING_MAX_NODES`, the parallelism the
    simulator models (data parallelism over all N nodes, the paper's section 8.3 setting, expert parallelism
    over groups that tile them), and the catalogued model for N nodes (a global batch at least one sample a
    node). Returns the model; WorkloadInputError names the field."""
    nodes = spec.nodes
    if nodes > TRAINING_MAX_NODES:
        raise WorkloadInputError(("nodes",), f"training plans simulate the job on every frontier topology's "
                                 f"verified schedules: at most {TRAINING_MAX_NODES} nodes, got {nodes}")
    if is_hybrid(spec):                       # multi-GPU hosts, hybrid parallelism (hybrid_workloads)
        return check_hybrid(spec, WorkloadInputError)
    par = _training(spec).parallelism
    data, expert = (par.data, par.expert) if par is not None else (None, None)
    if expert is not None and nodes % expert:
        raise WorkloadInputError(("workload", "training", "parallelism", "expert"),
                                 f"expert-parallel groups of {expert} nodes must tile the {nodes} nodes")
    model = training_model(spec)
    moe = any(layer.is_moe for layer in model.layers)
    try:
        model.expert_group(nodes)
    except ValueError as exc:
        raise WorkloadInputError(("workload", "training", "model_spec", "expert_parallel"), str(exc)) from None
    if data is not None and data != nodes:
        raise WorkloadInputError(("workload", "training", "parallelism", "data"),
                                 f"the simulator models data parallelism over all {nodes} nodes (each holds a "
                                 f"replica and allreduces its gradients), got {data}")
    if expert is not None:
        if not moe:
            raise WorkloadInputError(("workload", "training", "parallelism", "expert"),
                                     f"{model.name} has no MoE layer (moe_tokens_bytes) to shard over experts")
    return model


def check_topology(spec: PlanSpec) -> None:
    """What the request's topology strategy needs (PlanSpec.topology). TopoOpt's co-optimisation (NSDI'23
    section 4, Algorithm 1) splits each host's degree between AllReduce rings and matchings sized by the job's
    model-parallel traffic: it needs a training workload of the per-layer model (one GPU a host: the hybrid
    model searches its own strategies) whose model has model-parallel layers (moe_tokens_bytes: DLRM's
    embedding tables, MoE experts), and directed links (its rings are TotientPerms permutations x -> x + p,
    one direction each). WorkloadInputError names the field."""
    if spec.topology_strategy != "topoopt":
        return
    loc = ("topology", "strategy")
    if not is_training(spec):
        raise WorkloadInputError(loc, "TopoOpt's co-optimised topology needs a training workload with "
                                      "model-parallel traffic (workload.training); a sizes workload has no "
                                      "model-parallel demand to size its matchings by")
    if is_hybrid(spec):
        raise WorkloadInputError(loc, "TopoOpt's co-optimised topology is for the per-layer model (gpus_per_host "
                                      "1, no strategy, global_batch or transformer); the hybrid-parallel model "
                                      "chooses topology and strategy together on the frontier")
    if spec.bidirectional_only:
        raise WorkloadInputError(("bidirectional_only",), "TopoOpt's AllReduce rings are directed permutations "
                                                          "x -> x + p (TotientPerms): they need directed links")
    model = training_model(spec)
    if not any(layer.is_moe for layer in model.layers):
        raise WorkloadInputError(loc, f"{model.name} has no model-parallel layer (moe_tokens_bytes: DLRM's "
                                      "embedding tables, MoE experts): TopoOpt's topology would be AllReduce "
                                      "rings only; the finder's frontier serves a data-parallel job")


def message_sizes(spec: PlanSpec) -> list[int]:
    """The allreduce family's message sizes the plan predicts times for: the sizes form's sizes, or a training
    job's DDP bucket capacities (a bucket's allreduce carries at least its capacity, the last one less)."""
    if is_hybrid(spec):
        return hybrid_message_sizes(spec)
    if is_training(spec):
        return list(training_model(spec).buckets_bytes)
    return list(spec.workload.sizes_bytes)


def alltoall_sizes(spec: PlanSpec, model: ModelSpec | None = None) -> list[int]:
    """Bytes per node of the workload's all-to-alls (sorted, distinct, at most `MAX_ALLTOALL_SIZES`: the
    largest kept): the sizes form's alltoall_bytes, or the MoE layers' moe_tokens_bytes."""
    if is_hybrid(spec):
        sizes = hybrid_alltoall_sizes(spec)
    elif is_training(spec):
        model = model or training_model(spec)
        sizes = sorted({layer.moe_tokens_bytes for layer in model.layers if layer.is_moe})
    else:
        b = spec.workload.alltoall_bytes
        sizes = [int(b)] if b else []
    return sizes[-MAX_ALLTOALL_SIZES:]


def has_alltoall(spec: PlanSpec) -> bool:
    """True when the plan builds an all-to-all schedule: the sizes form gives alltoall_bytes, or the training
    job's model has MoE layers."""
    return bool(alltoall_sizes(spec))


def workload_items(spec: PlanSpec) -> list[WorkloadItem]:
    """The workload's collectives of the allreduce family with their sizes and weights: the sizes form's, or
    a training job's DDP allreduces (one per bucket capacity, `message_sizes`); what selection prices and a
    revision compares."""
    if is_training(spec):
        return [WorkloadItem(Collective.ALLREDUCE, float(b), 1.0) for b in message_sizes(spec)]
    return spec.workload.sizes_items
