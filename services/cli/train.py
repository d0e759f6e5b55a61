"""`fabricplan train N D`: a training job's iteration time on the frontier and the baselines (the paper's section
8.3): one accelerator per node here; hosts of several GPUs and hybrid parallelism in `services.cli.hybrid`.
"""
from __future__ import annotations

import json
import time

from .common import UsageError
from .inputs import MAX_MODEL_FILE_BYTES, frontier_of, train_topology
from .hybrid import hybrid_wanted, run_hybrid

__all__ = ["register", "run"]


def _training_model(args):
    """A catalogued model for N nodes, or a JSON model description file (DESIGN 4.10)."""
    from pathlib import Path

    from services.synthesis.evaluate.model_catalog import CATALOG, catalog_model
    from services.synthesis.evaluate.training_job import ModelSpecError, parse_model_spec

    if args.model.lower() in CATALOG:
        try:
            return catalog_model(args.model, args.nodes, device=args.device or "a100", batch=args.batch)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    path = Path(args.model)
    if not path.is_file():
        raise UsageError(f"--model {args.model!r} is neither a catalogued model ({', '.join(CATALOG)}) nor a file")
    if args.batch is not None:
        raise UsageError("--batch applies to catalogued models (a model file gives its compute per layer)")
    if path.stat().st_size > MAX_MODEL_FILE_BYTES:
        raise UsageError(f"{path}: model files are limited to {MAX_MODEL_FILE_BYTES >> 20} MB")
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable JSON model description ({exc})") from None
    if isinstance(data, dict) and args.device and "device" not in data:
        data["device"] = args.device
    try:
        return parse_model_spec(data)
    except ModelSpecError as exc:
        raise UsageError(f"{path}: {exc}") from None


def run(args) -> int:
    from services.synthesis.evaluate.training import evaluate_training
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.search.finder import MAX_DEGREE, MAX_NODES

    if (args.alpha_us is not None and args.alpha_us < 0) or (args.bandwidth_gbps is not None and
                                                             args.bandwidth_gbps <= 0):
        raise UsageError("--alpha-us must be >= 0 and --bandwidth-gbps > 0")
    if not (2 <= args.nodes <= MAX_NODES and 1 <= args.degree <= MAX_DEGREE):
        raise UsageError(f"N must be in 2..{MAX_NODES} and D in 1..{MAX_DEGREE}, got {args.nodes} and {args.degree}")
    if hybrid_wanted(args):
        return run_hybrid(args)
    if args.alpha_us is None or args.bandwidth_gbps is None:
        raise UsageError("--alpha-us and --bandwidth-gbps are required (defaults apply to hosts of several GPUs)")
    model = _training_model(args)
    topologies = None
    if args.topology:
        topologies = [train_topology(args)]
    else:
        frontier_of(args, "allreduce")          # the frontier, with the CLI's disk cache of evaluated bases
    link = LinkModel.from_units(args.alpha_us, args.bandwidth_gbps)
    t0 = time.perf_counter()
    try:
        ev = evaluate_training(model, args.nodes, args.degree, link, topologies=topologies,
                               bidirectional=args.bidirectional, alltoall=args.alltoall_cost)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = {**ev.to_dict(), "alpha_us": args.alpha_us, "bandwidth_gbps": args.bandwidth_gbps,
           "seconds": round(time.perf_counter() - t0, 3)}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{ev.model} on N = {ev.nodes}, d = {ev.degree} (alpha {args.alpha_us} us, B {args.bandwidth_gbps} Gbps); "
          f"lower bound {ev.lower_bound_s * 1e3:.3f} ms")
    print(f"{'iteration ms':>12} {'compute':>9} {'all-to-all':>10} {'exposed AR':>10} {'bucket MB':>9}  topology")
    for e in ev.entries:
        r = e.report
        mark = "*" if e is ev.best else " "
        label = e.expr if e.kind != "baseline" else f"{e.name}: {e.expr}"
        print(f"{r.iteration_s * 1e3:>12.3f} {r.compute_s * 1e3:>9.3f} {r.alltoall_s * 1e3:>10.3f} "
              f"{r.exposed_allreduce_s * 1e3:>10.3f} {r.bucket_bytes / (1 << 20):>9g} {mark}{label}")
    return 0


def register(sub) -> None:
    """Add the `train` sub-command to the parser's subparsers."""
    p = sub.add_parser("train", help="a training job's iteration time on the frontier and the baselines")
    p.add_argument("nodes", type=int)
    p.add_argument("degree", type=int)
    p.add_argument("--model", required=True, help="a catalogued model (e.g. resnet50, gpt2-small, switch-c-2048) "
                                                    "or a JSON model description file")
    p.add_argument("--alpha-us", type=float, default=None,
                    help="per-step latency (required with one GPU per node; default 5 with --gpus-per-host)")
    p.add_argument("--bandwidth-gbps", type=float, default=None,
                    help="node (host) egress bandwidth B over its DEGREE NICs (required with one GPU per node; "
                         "default DEGREE x 200 with --gpus-per-host)")
    p.add_argument("--topology", help="simulate this expression instead of the frontier, or a switched network: "
                                       "fat-tree, fat-tree-2to1, fat-tree-4to1, rail-optimised")
    p.add_argument("--device", default=None, help="device profile: a100 (default), h100; with several GPUs per "
                                                   "host also h200, b200")
    p.add_argument("--gpus-per-host", type=int, default=1,
                    help="GPUs per host joined by a scale-up domain (default 1: the paper's one accelerator per node)")
    p.add_argument("--global-batch", type=int, default=None, help="sequences per iteration (hybrid parallelism)")
    p.add_argument("--zero3-efficiency", type=float, default=None,
                   help="the fraction of the schedules' collective bandwidth ZeRO-3's collectives reach, in (0, 1] "
                        "(hybrid; default 0.1248, DeepSpeed ZeRO-3 in Narayanan et al. SC'21 Table 2; 1.0 for an "
                        "implementation at the schedules' rate)")
    p.add_argument("--moe-host-us", type=float, default=None,
                   help="host time in microseconds per local expert and grouped-GEMM call the GPU waits for in a "
                        "dropless MoE layer, in [0, 10000] (hybrid; default: solved from a published Megatron-Core "
                        "run, docs/training.md; 0 for a CUDA-graphed or sync-free stack)")
    p.add_argument("--parallelism", default=None,
                    help="auto (search) or tp=8,pp=8,dp=16[,ep=..][,cp=..][,sp=0|1][,zero=..][,mb=..][,vp=..]"
                         "[,recompute=..][,overlap=none|microbatch|dualpipe][,dispatch=alltoall|deepep][,etp=..]: "
                         "given keys are fixed, the others searched")
    p.add_argument("--batch", type=int, default=None, help="samples per node (catalogued models)")
    p.add_argument("--alltoall-cost", choices=["mcf", "schedule"], default="mcf",
                    help="all-to-all time from the MCF throughput (default) or a verified all-to-all schedule")
    p.add_argument("--bidirectional", action="store_true", help="only frontier topologies duplex cabling can realise")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
