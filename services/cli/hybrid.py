"""`fabricplan train` on hosts of several GPUs (hybrid parallelism; docs/training.md): the transformer job, its
strategy searched or fixed, on the frontier topologies and the switched baselines. Not a command of its own:
`services.cli.train` hands over when the arguments ask for it (`hybrid_wanted`).
"""
from __future__ import annotations

import json
import time

from .common import UsageError
from .inputs import frontier_of, model_file, train_topology

__all__ = ["hybrid_wanted", "run_hybrid"]


def hybrid_wanted(args) -> bool:
    """The multi-GPU hybrid-parallel model (docs/training.md) runs when asked for (hosts of several GPUs, a strategy,
    a global batch, a switched topology) or when the model exists only as a transformer description; otherwise
    `train` keeps the one-accelerator-per-node model of the paper's section 8.3."""
    from services.synthesis.evaluate.fabrics import SWITCHED
    from services.synthesis.evaluate.model_catalog import CATALOG
    from services.synthesis.evaluate.transformer import LLM_CATALOG

    if (args.gpus_per_host != 1 or args.parallelism or args.global_batch is not None
            or args.zero3_efficiency is not None or args.moe_host_us is not None):
        return True
    if args.topology and args.topology.lower().replace("_", "-").replace("optimized", "optimised") in SWITCHED:
        return True
    key = args.model.lower()
    if key in LLM_CATALOG and key not in CATALOG:
        return True
    if key not in CATALOG:
        data = model_file(args)
        from services.synthesis.evaluate.transformer import is_transformer_file

        return is_transformer_file(data)
    return False


def _hybrid_job(args):
    """(Job, nics) of a hybrid-parallel `train` (catalogued transformer or a `{"transformer": ...}` file)."""
    from pydantic import ValidationError

    from services.synthesis.evaluate.devices import gpu_profile
    from services.synthesis.evaluate.parallelism import Job
    from services.synthesis.evaluate.transformer import (LLM_CATALOG, TransformerModelFile, is_transformer_file,
                                                        llm_entry)

    from services.synthesis.evaluate.model_catalog import CATALOG

    entry = llm_entry(args.model)
    if entry is not None:
        name, model, batch = entry.name, entry.model, entry.global_batch
    elif args.model.lower() in CATALOG:
        raise UsageError(f"--model {args.model}: hosts of several GPUs and strategies need a transformer described "
                         "by its hyperparameters (catalogued: " + ", ".join(LLM_CATALOG) + "); the per-layer "
                         "models run with --gpus-per-host 1")
    else:
        data = model_file(args)
        if not is_transformer_file(data):
            raise UsageError(f"--model {args.model}: hosts of several GPUs and strategies need a transformer "
                             "(a catalogued one or a file {\"name\", \"transformer\": {...}}); per-layer models "
                             "run with --gpus-per-host 1")
        try:
            f = TransformerModelFile.model_validate(data)
        except ValidationError as exc:
            raise UsageError(f"{args.model}: " + "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors())) from None
        name, model, batch = f.name, f.transformer, f.global_batch
    if args.batch is not None:
        raise UsageError("--batch is per node of the one-GPU model; give --global-batch (sequences per iteration)")
    batch = args.global_batch if args.global_batch is not None else batch
    if batch is None:
        raise UsageError(f"{name}: give --global-batch (the model file has no global_batch)")
    if not 1 <= batch <= 1 << 24:
        raise UsageError(f"--global-batch must be in 1..{1 << 24}, got {batch}")
    if not 1 <= args.gpus_per_host <= 64:
        raise UsageError(f"--gpus-per-host must be in 1..64, got {args.gpus_per_host}")
    try:
        device = gpu_profile(args.device or "a100")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    kw = {}
    if args.zero3_efficiency is not None:
        if not 0 < args.zero3_efficiency <= 1:     # also refuses nan
            raise UsageError(f"--zero3-efficiency must be in (0, 1], got {args.zero3_efficiency:g}")
        kw["zero3_efficiency"] = args.zero3_efficiency
    if args.moe_host_us is not None:
        if not 0 <= args.moe_host_us <= 10000:     # also refuses nan
            raise UsageError(f"--moe-host-us must be in [0, 10000], got {args.moe_host_us:g}")
        kw["host_expert_s"] = args.moe_host_us * 1e-6
    return Job(model, name, batch, device, args.nodes, args.gpus_per_host, **kw)


def run_hybrid(args) -> int:
    from services.synthesis.evaluate.fabrics import SWITCHED
    from services.synthesis.evaluate.hybrid import evaluate_hybrid
    from services.synthesis.evaluate.parallelism import parse_parallelism
    from services.synthesis.schedule.cost import LinkModel

    job = _hybrid_job(args)
    fixed = None
    if args.parallelism and args.parallelism.lower() != "auto":
        try:
            fixed = parse_parallelism(args.parallelism)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.alltoall_cost != "mcf":
        raise UsageError("--alltoall-cost applies to the one-GPU-per-node model; hybrid jobs use the MCF throughput")
    topologies = None
    if args.topology:
        key = args.topology.lower().replace("_", "-").replace("optimized", "optimised")
        if key in SWITCHED:
            topologies = [key]
        else:
            topologies = [train_topology(args)]
    else:
        frontier_of(args, "allreduce")
    alpha = 5.0 if args.alpha_us is None else args.alpha_us
    gbps = 200.0 * args.degree if args.bandwidth_gbps is None else args.bandwidth_gbps
    link = LinkModel.from_units(alpha, gbps)
    t0 = time.perf_counter()
    try:
        ev = evaluate_hybrid(job, args.degree, link, topologies=topologies, fixed=fixed,
                             bidirectional=args.bidirectional)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = {**ev.to_dict(), "alpha_us": alpha, "bandwidth_gbps": gbps, "seconds": round(time.perf_counter() - t0, 3)}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0 if ev.best is not None else 2
    print(f"{job.name} on {job.hosts} hosts x {job.gpus_per_host} {job.device.name} ({args.degree} NICs, "
          f"{gbps:g} Gbps per host, alpha {alpha:g} us), global batch {job.global_batch}")
    print(f"{'iteration s':>11} {'TFLOP/s':>7} {'MFU':>5} {'tp':>3} {'cp':>3} {'pp':>3} {'dp':>4} {'ep':>3} {'z':>1} "
          f"{'mb':>2} {'vp':>2} {'rc':>4} {'bubble':>7} {'TP':>6} {'CP':>6} {'PP':>6} {'DP':>6} {'EP':>6} {'host':>6} {'GB/GPU':>6}  "
          f"topology")
    for e in ev.entries:
        label = e.fabric.expr if e.fabric.kind != "baseline" else f"{e.fabric.name}: {e.fabric.expr}"
        mark = "*" if e is ev.best else " "
        if e.result is None:
            print(f"{'-':>11} refused: {e.refused}  {mark}{label}")
            continue
        r, s, b = e.result, e.result.strategy, e.result.breakdown
        print(f"{r.iteration_s:>11.4f} {r.achieved_tflops_per_gpu:>7.1f} {r.mfu:>5.2f} {s.tp:>3} {s.cp:>3} {s.pp:>3} "
              f"{s.dp:>4} {s.ep:>3} {s.zero:>1} {s.micro_batch:>2} {s.interleave:>2} {s.recompute[:4]:>4} "
              f"{b.bubble:>7.3f} {b.tp:>6.3f} {b.cp:>6.3f} {b.pp:>6.3f} {b.dp:>6.3f} {b.ep:>6.3f} {b.host:>6.3f} "
              f"{r.memory.total / 1e9:>6.1f} {mark}{label}")
    print(ev.why)
    return 0 if ev.best is not None else 2
