"""A hybrid-parallel training plan (issue 27; docs/training.md): the plan's nodes are hosts of
`gpus_per_host` GPUs and its degree their NICs; the select stage runs `evaluate_hybrid` (every frontier entry
and baseline, each with its fastest strategy, or the request's fixed one) and chooses the frontier entry with
the smallest iteration time: topology and strategy together.

The request's training block takes the options `fabricplan train` does: `model` (a catalogued transformer)
or `transformer_spec` (the file form), `gpus_per_host`, `global_batch`, `strategy` ("auto" or
"tp=..,pp=..,dp=.."), `device`. The plan's `training_hybrid` block is `HybridEvaluation.to_dict()`, frontier
entries labelled `frontier`; `workload_time_us` of every frontier entry and baseline is its iteration time.
"""
from __future__ import annotations

from services.synthesis.evaluate.devices import gpu_profile
from services.synthesis.evaluate.hybrid import expr_fabric, evaluate_hybrid
from services.synthesis.evaluate.iteration import CollectiveCost
from services.synthesis.evaluate.model_catalog import CATALOG
from services.synthesis.evaluate.parallelism import Job, feasible, parse_parallelism
from services.synthesis.evaluate.transformer import LLM_CATALOG, Transformer, TransformerModelFile
from services.synthesis.schedule.cost import LinkModel

__all__ = ["HYBRID_MAX_GPUS", "check_hybrid", "hybrid_alltoall_sizes", "hybrid_baselines_time_us", "hybrid_job",
           "hybrid_message_sizes", "is_hybrid", "stage_select_hybrid"]

HYBRID_MAX_GPUS = 1 << 17


class HybridInputError(ValueError):
    def __init__(self, loc: tuple, msg: str):
        self.loc, self.msg = loc, msg
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}")


def _t(req: dict) -> dict:
    return req["workload"]["training"]


def is_hybrid(req: dict) -> bool:
    """A training workload for the hybrid-parallel model: several GPUs a host, a strategy, a global batch, an
    inline transformer, or a model catalogued only as a transformer."""
    t = (req.get("workload") or {}).get("training") or {}
    if not t:
        return False
    if (t.get("gpus_per_host") or 1) > 1 or t.get("strategy") or t.get("global_batch") or t.get("transformer_spec"):
        return True
    name = (t.get("model") or "").lower()
    return name in LLM_CATALOG and name not in CATALOG


def hybrid_job(req: dict, error=HybridInputError) -> tuple[Job, dict | None]:
    """(Job, fixed strategy keys or None); `error(loc, msg)` names the field."""
    t = _t(req)
    loc = ("workload", "training")
    if t.get("model_spec") is not None:
        raise error((*loc, "model_spec"), "hosts of several GPUs and strategies need a transformer (model or "
                                          "transformer_spec); per-layer models run with gpus_per_host 1")
    if t.get("model") is not None:
        entry = LLM_CATALOG.get(t["model"].lower())
        if entry is None:
            raise error((*loc, "model"), f"{t['model']} is not a catalogued transformer ({', '.join(LLM_CATALOG)}); "
                                         "the per-layer models run with gpus_per_host 1")
        name, model, batch = entry.name, entry.model, entry.global_batch
    else:
        f = TransformerModelFile.model_validate(t["transformer_spec"])
        name, model, batch = f.name, f.transformer, f.global_batch
    if t.get("batch") is not None:
        raise error((*loc, "batch"), "batch is per node of the one-GPU model; give global_batch")
    batch = t.get("global_batch") or batch
    if batch is None:
        raise error((*loc, "global_batch"), f"{name}: give global_batch (sequences per iteration)")
    device = t.get("device") or "a100"
    if not isinstance(device, str):
        raise error((*loc, "device"), "hybrid plans take a named GPU profile (" + ", ".join(
            ["a100", "h100", "h200", "b200"]) + ")")
    try:
        dev = gpu_profile(device)
    except ValueError as exc:
        raise error((*loc, "device"), str(exc)) from None
    g = t.get("gpus_per_host") or 1
    if req["nodes"] * g > HYBRID_MAX_GPUS:
        raise error((*loc, "gpus_per_host"), f"at most {HYBRID_MAX_GPUS} GPUs in all, got {req['nodes']} x {g}")
    strategy = t.get("strategy")
    fixed = parse_parallelism(strategy) if strategy and strategy.lower() != "auto" else None
    return Job(model, name, batch, dev, req["nodes"], g), fixed


def check_hybrid(req: dict, error=HybridInputError) -> Job:
    """What the API checks before accepting a hybrid plan: the job builds and some strategy fits its GPUs
    (shapes, batch, memory: none of them depend on the topology)."""
    job, fixed = hybrid_job(req, error)
    ok, _, tried, last = feasible(job, fixed)
    if not ok:
        raise error(("workload", "training", "strategy"),
                    f"no strategy of {job.gpus} GPUs matches {fixed}" if not tried else
                    f"no feasible strategy among {tried} tried; e.g. {last}")
    return job


def hybrid_message_sizes(req: dict) -> list[int]:
    """The message size a hybrid plan prices its allgather-family schedules for: the inter-host DP collective
    of a host's gradients at pp = 1 (16-bit, every dense parameter: 2 P bytes per host)."""
    job, _ = hybrid_job(req)
    return [2 * job.model.dense_params]


def hybrid_alltoall_sizes(req: dict) -> list[int]:
    """Bytes per host of one MoE all-to-all at tp = 1, one sequence a GPU: G x 2 s h top_k."""
    job, _ = hybrid_job(req)
    m: Transformer = job.model
    if m.experts is None:
        return []
    return [job.gpus_per_host * 2 * m.seq_len * m.hidden * m.k]


def _link(req: dict) -> LinkModel:
    return LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])


def stage_select_hybrid(state: dict, plan_id: str, req: dict, advance) -> dict:
    """Every frontier entry (priced by the frontier's exact reduce-scatter and allgather costs) and baseline with
    its fastest strategy; the frontier entry with the smallest iteration time is selected."""
    from fractions import Fraction

    from services.synthesis.topology.catalog import build

    job, fixed = hybrid_job(req)
    moe = job.model.experts is not None
    link = _link(req)
    topologies = [build(e["expr"]) for e in state["frontier"]]

    def progress(done: int, total: int, name: str) -> None:
        advance(plan_id, "select", 0.2 + 0.1 * done / max(1, total),
                f"searching strategies of {job.name} on {name} ({done + 1} of at most {total})")

    prices = {}
    for e in state["frontier"]:
        c = e.get("costs") or {}
        if "reducescatter" in c and "allgather" in c:
            prices[e["expr"]] = tuple(CollectiveCost(c[k]["steps"], Fraction(c[k]["tau_exact"]))
                                      for k in ("reducescatter", "allgather"))
    ev = evaluate_hybrid(job, req["degree"], link, topologies=topologies, fixed=fixed, progress=progress,
                         fabric=lambda t: expr_fabric(t, link, moe=moe, kind="frontier", prices=prices.get(t.expr)))
    out = ev.to_dict()
    by_expr = {e["expr"]: e for e in out["entries"] if e["kind"] == "frontier"}
    frontier = [{**entry, "workload_time_us": by_expr[entry["expr"]]["iteration_s"] * 1e6}
                if by_expr.get(entry["expr"], {}).get("iteration_s") is not None else entry
                for entry in state["frontier"]]
    if ev.best is None:
        raise ValueError(out["why"])
    selected = next(e for e in frontier if e["expr"] == out["best"])
    advance(plan_id, "select", 0.3, f"selected {selected['expr']}: iteration {out['best_iteration_s']:.4g} s")
    return {**state, "frontier": frontier, "selected": selected, "training_hybrid": out}


def hybrid_baselines_time_us(training_hybrid: dict) -> dict[str, float]:
    return {e["name"]: e["iteration_s"] * 1e6 for e in training_hybrid["entries"]
            if e["kind"] == "baseline" and e.get("iteration_s") is not None}

