"""What a hybrid-parallel training workload asks for (docs/training.md): the plan's nodes are hosts of
`gpus_per_host` GPUs and its degree their NICs. The request's training block takes the options `fabricplan
train` does: `model` (a catalogued transformer) or `transformer_spec` (the file form), `gpus_per_host`,
`global_batch`, `strategy` ("auto" or "tp=..,pp=..,dp=.."), `device`. Plain functions of the typed request
(services.jobs.requests.plan_spec.PlanSpec), used by the API's check before accepting a plan and by the worker's
stages (`plan.hybrid` selects).
"""
from __future__ import annotations

from services.synthesis.evaluate.devices import GPU_PROFILES, gpu_profile
from services.synthesis.evaluate.model_catalog import CATALOG
from services.synthesis.evaluate.parallelism import Job, feasible, leanest, parse_parallelism
from services.synthesis.evaluate.transformer import LLM_CATALOG, Transformer

from .plan_spec import PlanSpec, TrainingWorkload

__all__ = ["HYBRID_MAX_GPUS", "HybridInputError", "check_hybrid", "hybrid_alltoall_sizes", "hybrid_job",
           "hybrid_message_sizes", "is_hybrid"]

HYBRID_MAX_GPUS = 1 << 17


class HybridInputError(ValueError):
    def __init__(self, loc: tuple, msg: str):
        self.loc, self.msg = loc, msg
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}")


def _t(spec: PlanSpec) -> TrainingWorkload:
    return spec.workload.training


def is_hybrid(spec: PlanSpec) -> bool:
    """A training workload for the hybrid-parallel model: several GPUs a host, a strategy, a global batch, an
    inline transformer, or a model catalogued only as a transformer."""
    t = spec.training
    if t is None:
        return False
    if (t.gpus_per_host > 1 or t.strategy or t.global_batch or t.transformer_spec is not None
            or t.zero3_efficiency is not None or t.moe_host_us is not None):
        return True
    name = (t.model or "").lower()
    return name in LLM_CATALOG and name not in CATALOG


def hybrid_job(spec: PlanSpec, error=HybridInputError) -> tuple[Job, dict | None]:
    """(Job, fixed strategy keys or None); `error(loc, msg)` names the field."""
    t = _t(spec)
    loc = ("workload", "training")
    if t.model_spec is not None:
        raise error((*loc, "model_spec"), "hosts of several GPUs and strategies need a transformer (model or "
                                          "transformer_spec); per-layer models run with gpus_per_host 1")
    if t.model is not None:
        entry = LLM_CATALOG.get(t.model.lower())
        if entry is None:
            raise error((*loc, "model"), f"{t.model} is not a catalogued transformer ({', '.join(LLM_CATALOG)}); "
                                         "the per-layer models run with gpus_per_host 1")
        name, model, batch = entry.name, entry.model, entry.global_batch
    else:
        f = t.transformer_spec
        name, model, batch = f.name, f.transformer, f.global_batch
    if t.batch is not None:
        raise error((*loc, "batch"), "batch is per node of the one-GPU model; give global_batch")
    batch = t.global_batch or batch
    if batch is None:
        raise error((*loc, "global_batch"), f"{name}: give global_batch (sequences per iteration)")
    device = t.device or "a100"
    if not isinstance(device, str):
        raise error((*loc, "device"), f"hybrid plans take a named GPU profile ({', '.join(GPU_PROFILES)})")
    try:
        dev = gpu_profile(device)
    except ValueError as exc:
        raise error((*loc, "device"), str(exc)) from None
    g = t.gpus_per_host
    if spec.nodes * g > HYBRID_MAX_GPUS:
        raise error((*loc, "gpus_per_host"), f"at most {HYBRID_MAX_GPUS} GPUs in all, got {spec.nodes} x {g}")
    strategy = t.strategy
    fixed = parse_parallelism(strategy) if strategy and strategy.lower() != "auto" else None
    kw: dict = {} if t.zero3_efficiency is None else {"zero3_efficiency": t.zero3_efficiency}
    if t.moe_host_us is not None:
        kw["host_expert_s"] = t.moe_host_us * 1e-6
    return Job(model, name, batch, dev, spec.nodes, g, **kw), fixed


def check_hybrid(spec: PlanSpec, error=HybridInputError) -> Job:
    """What the API checks before accepting a hybrid plan: the job builds and some strategy fits its GPUs
    (shapes, batch, memory: none of them depend on the topology; `parallelism.leanest` keeps it quick)."""
    job, fixed = hybrid_job(spec, error)
    ok, _, tried, last = feasible(job, leanest(fixed))
    if not ok:
        raise error(("workload", "training", "strategy"),
                    f"no strategy of {job.gpus} GPUs matches {fixed}" if not tried else
                    f"no feasible strategy among {tried} tried; e.g. {last}")
    return job


def hybrid_message_sizes(spec: PlanSpec) -> list[int]:
    """The message size a hybrid plan prices its allgather-family schedules for: the inter-host DP collective
    of a host's gradients at pp = 1 (16-bit, every dense parameter: 2 P bytes per host)."""
    job, _ = hybrid_job(spec)
    return [2 * job.model.dense_params]


def hybrid_alltoall_sizes(spec: PlanSpec) -> list[int]:
    """Bytes per host of one MoE all-to-all at tp = 1, one sequence a GPU: G x 2 s h top_k."""
    job, _ = hybrid_job(spec)
    m: Transformer = job.model
    if m.experts is None:
        return []
    return [job.gpus_per_host * 2 * m.seq_len * m.hidden * m.k]
