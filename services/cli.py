"""`fabricplan` command line (DESIGN section 5).

Bad input and refusals: exit code 2 with a message on stderr, `fabricplan: error: ...`; under `--json` the
message is one JSON object on stderr instead (stdout keeps only results), `{"error": {"type", "message",
...}}` (see `error_object`). A reader that closes the pipe early (`... --json | head`) ends the command
quietly with the shell's SIGPIPE status (141), not a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from contextlib import contextmanager

SIGPIPE_EXIT = 141          # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


class UsageError(Exception):
    """Bad input from the command line (exit code 2). `type` and `fields` go into the JSON error object."""

    def __init__(self, message: str, *, type: str = "usage", **fields):
        super().__init__(message)
        self.type, self.fields = type, fields


def error_object(message: str, type: str = "usage", **fields) -> dict:
    """The JSON form of an error under --json: {"error": {"type", "message", "exit_code", ...fields}}.

    type: usage (bad arguments or input), refused (a compile that nothing fits: `limit`, `value`, `maximum`
    name the runtime's rule), unverified (no schedule passed the model checker, exit code 1).
    """
    exit_code = 1 if type == "unverified" else 2
    return {"error": {"type": type, "message": message, "exit_code": exit_code,
                      **{k: v for k, v in fields.items() if v is not None}}}


def _report_error(message: str, as_json: bool, type: str = "usage", **fields) -> None:
    if as_json:
        print(json.dumps(error_object(message, type, **fields)), file=sys.stderr)
    else:
        print(f"fabricplan: error: {message}" if type != "unverified" else f"fabricplan: {message}",
              file=sys.stderr)


def _topology(expr: str, schedule: bool = True):
    """Size the expression from its tree (and, for a schedule, against the schedule limits) before building."""
    from services.synthesis.bfb.lp import check_schedule_size
    from services.synthesis.topology.catalog import build
    from services.synthesis.topology.size import check_build, size

    try:
        sz = check_build(size(expr))
        if schedule:
            check_schedule_size(sz)
        return build(expr)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _link_costs(args, topo):
    """Per-arc costs: uniform from --alpha-us/--bandwidth-gbps, or the --links file (validated)."""
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.schedule.links import LinkCosts, link_costs_from_json

    finite = all(math.isfinite(x) for x in (args.alpha_us, args.bandwidth_gbps, args.size))
    if not finite or args.alpha_us < 0 or args.bandwidth_gbps <= 0 or args.size <= 0:
        raise UsageError("--alpha-us must be finite and >= 0, --bandwidth-gbps and --size finite and > 0")
    model = LinkModel.from_units(args.alpha_us, args.bandwidth_gbps)
    if not getattr(args, "links", None):
        return LinkCosts.uniform(topo, model)
    try:
        with open(args.links, "rb") as fh:
            raw = fh.read(MAX_LINKS_FILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--links: cannot read {args.links}: {exc.strerror}") from None
    if len(raw) > MAX_LINKS_FILE_BYTES:
        raise UsageError(f"--links: {args.links} is larger than {MAX_LINKS_FILE_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"--links: {args.links} is not valid JSON: {exc}") from None
    try:
        return link_costs_from_json(topo, data, default=model)
    except ValueError as exc:
        raise UsageError(f"--links: {args.links}: {exc}") from None


MAX_LINKS_FILE_BYTES = 64 << 20


def _compare(topo, collective, costs, args, schedulers, **kw):
    """Build every scheduler's candidate, verify them all, serve the fastest verified one."""
    from services.synthesis.bfb.compare import build_candidates, choose
    from services.synthesis.bfb.lp import ScheduleTooLarge
    from services.synthesis.schedule.verify import ScheduleInvalid

    try:
        cands = build_candidates(topo, costs, args.size, collectives=(collective,), schedulers=schedulers,
                                 greedy_chunks=args.greedy_chunks, **kw)[collective]
        return choose(topo, collective, cands, args.size, verify_mode="all")
    except ScheduleInvalid as exc:
        _report_error(f"no schedule passed the model checker: {exc}", getattr(args, "json", False), "unverified")
        return None
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _comparison_summary(topo, collective, comparison, seconds: float, output: str | None) -> dict:
    """The chosen schedule's summary (DESIGN section 5 fields) plus every scheduler's cost."""
    from services.synthesis.schedule.report import schedule_summary

    chosen = comparison.chosen
    summary = schedule_summary(topo, comparison.reports[chosen.scheduler], seconds, collective)
    summary["scheduler"] = chosen.scheduler
    summary["size_bytes"] = comparison.size_bytes
    summary["time_us"] = chosen.time_s * 1e6
    if chosen.predicted_tau is not None:
        summary["predicted_tau_exact"] = str(chosen.predicted_tau)
        summary["prediction_matches"] = chosen.verified and chosen.tau == chosen.predicted_tau
    if chosen.predicted_time_s is not None:
        summary["predicted_time_us"] = chosen.predicted_time_s * 1e6
    summary["schedulers"] = [c.as_dict() for c in comparison.candidates]
    if output:
        with open(output, "wb") as fh:
            fh.write(chosen.schedule.to_bytes())
        summary["output"] = output
    return summary


def cmd_bfb(args) -> int:
    from services.synthesis.schedule.ir import Collective

    topo = _topology(args.expr)
    collective = Collective.parse(args.collective)
    if collective is Collective.ALLTOALL:
        raise UsageError("BFB builds allgather, reduce-scatter and allreduce schedules; for an all-to-all use "
                         "`fabricplan schedule EXPR --collective alltoall`")
    costs = _link_costs(args, topo)
    if args.chunks is not None and args.chunks < 1:
        raise UsageError(f"--chunks must be a positive integer, got {args.chunks}")
    schedulers = ("bfb", "greedy") if not args.links else ("bfb-hetero", "bfb", "greedy")
    t0 = time.perf_counter()
    opts = dict(workers=args.workers, shortcut=not args.no_shortcut, chunks=args.chunks)
    comparison = _compare(topo, collective, costs, args, schedulers, bfb_options=opts)
    if comparison is None:
        return 1
    _emit(_comparison_summary(topo, collective, comparison, time.perf_counter() - t0, args.output), args.json)
    return 0


def cmd_schedule(args) -> int:
    from services.synthesis.bfb.lp import ScheduleTooLarge
    from services.synthesis.search.construct import construct
    from services.synthesis.schedule.ir import Collective

    topo = _topology(args.expr)               # validates the expression with a clear message
    collective = Collective.parse(args.collective)
    if collective is Collective.ALLTOALL:
        if args.by_size or args.links:
            raise UsageError("--by-size and --links cover allgather, reducescatter and allreduce")
        return _schedule_alltoall(args, topo)
    if args.steps is not None or args.chunks is not None:
        raise UsageError("--steps and --chunks apply to --collective alltoall")
    if args.by_size:
        return _schedule_by_size(args, collective)
    try:
        built = construct(args.expr, collective)
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None
    costs = _link_costs(args, built.topology)
    prebuilt = {"construction": {collective: (built.schedule, built.seconds, built.prediction.tau)}}
    t0 = time.perf_counter()
    # on per-link costs the heterogeneous schedulers compete too (LP (14), trees, BFB without slow links)
    schedulers = ("greedy",) if not args.links else ("greedy", "bfb-hetero", "trees", "bfb-fast")
    comparison = _compare(built.topology, collective, costs, args, schedulers, prebuilt=prebuilt)
    if comparison is None:
        return 1
    summary = _comparison_summary(built.topology, collective, comparison,
                                  built.seconds + time.perf_counter() - t0, args.output)
    # the finder's price of the expression (search.pricing) against the schedule its construction built
    report = comparison.reports["construction"]
    summary["method"] = built.method
    summary["predicted_steps"] = built.prediction.steps
    summary["predicted_tau_exact"] = str(built.prediction.tau)
    summary["prediction_matches"] = report.ok and (report.steps, report.tau) == (built.prediction.steps,
                                                                                built.prediction.tau)
    _emit(summary, args.json)
    return 0


def _schedule_set(args, collective):
    """The expression's schedule set of `collective` (its construction among the candidates) and its costs."""
    from services.synthesis.bfb.lp import ScheduleTooLarge
    from services.synthesis.bfb.schedule_sets import schedule_sets
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.schedule.verify import ScheduleInvalid
    from services.synthesis.search.construct import construct

    if collective is Collective.ALLTOALL:
        raise UsageError("--by-size covers allgather, reducescatter and allreduce")
    try:
        built = construct(args.expr, Collective.ALLGATHER)
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None
    costs = _link_costs(args, built.topology)
    try:
        sets = schedule_sets(built.topology, costs, [collective], prebuilt={"construction": built.schedule})
    except ScheduleInvalid as exc:
        raise UsageError(f"no schedule passed the model checker: {exc}") from None
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return built.topology, sets[collective]


def _schedule_by_size(args, collective) -> int:
    if args.output:
        raise UsageError("-o writes one schedule; with --by-size use `fabricplan compile EXPR --by-size -o DIR`")
    topo, sset = _schedule_set(args, collective)
    _emit({"expr": topo.expr, "nodes": topo.nodes, **sset.as_dict()}, args.json)
    return 0


def _schedule_alltoall(args, topo) -> int:
    from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule

    try:
        result = alltoall_schedule(topo, steps=args.steps, chunks=args.chunks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    summary = result.to_dict()
    if args.output:
        with open(args.output, "wb") as fh:
            fh.write(result.schedule.to_bytes())
        summary["output"] = args.output
    _emit(summary, args.json)
    return 0


def _frontier(args, collective: str | None = None):
    """The frontier of (args.nodes, args.degree) for `collective` (default: args.collective)."""
    from services.synthesis.search.finder import FinderError, frontier
    from services.synthesis.search.pricing import CACHE, default_cache_dir

    from services.synthesis.search.candidates import PRICED

    if CACHE.path is None:                   # the CLI keeps evaluated prices on disk between runs
        CACHE.attach(default_cache_dir())
    with progress_bar(f"frontier N={args.nodes} d={args.degree}") as progress:
        token = PRICED.set(progress)
        try:
            return frontier(args.nodes, args.degree, bidirectional=args.bidirectional,
                            collective=collective or args.collective)
        except FinderError as exc:
            raise UsageError(str(exc)) from None
        finally:
            PRICED.reset(token)


def _entry(c, collective: str) -> dict:
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.finder import frontier_entry

    return frontier_entry(c, Collective.parse(collective))


def cmd_frontier(args) -> int:
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.finder import bounds

    entries = [_entry(c, args.collective) for c in _frontier(args)]
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    b = bounds(args.nodes, args.degree, Collective.parse(args.collective))
    print(f"Pareto frontier for N = {args.nodes}, d = {args.degree}, {Collective.parse(args.collective).value}"
          f"{' (bidirectional only)' if args.bidirectional else ''}; bound: {b['steps']} steps, "
          f"tau {float(b['tau']):.4f}")
    print(f"{'steps':>5} {'tau':>8} {'D':>4}  {'BW':>3} {'Moore':>5}  expr")
    for e in entries:
        print(f"{e['steps']:>5} {e['tau']:>8.4f} {str(e['diameter']):>4}  {'yes' if e['bw_optimal'] else '':>3} "
              f"{'yes' if e['moore_optimal'] else '':>5}  {e['expr']}")
    return 0


def cmd_select(args) -> int:
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.search.finder import FinderError, WorkloadItem, select
    from services.synthesis.schedule.ir import Collective

    if args.alpha_us < 0 or args.bandwidth_gbps <= 0:
        raise UsageError("--alpha-us must be >= 0 and --bandwidth-gbps > 0")
    if not args.size:
        raise UsageError("give at least one --size in bytes")
    weights = args.weight or [1.0] * len(args.size)
    if len(weights) != len(args.size):
        raise UsageError(f"{len(args.size)} sizes but {len(weights)} weights")
    collective = Collective.parse(args.collective)
    if collective is Collective.ALLTOALL:
        raise UsageError("give the all-to-all share with --alltoall-bytes and --alltoall-weight")
    items = [WorkloadItem(collective, float(s), float(w)) for s, w in zip(args.size, weights)]
    link = LinkModel.from_units(args.alpha_us, args.bandwidth_gbps)
    if args.alltoall_weight and not args.alltoall_bytes:
        raise UsageError("--alltoall-weight needs --alltoall-bytes")
    try:
        cands = _frontier(args)
        f_of = {}
        if args.alltoall_weight:
            from services.synthesis.evaluate.alltoall import alltoall_throughput
            from services.synthesis.topology.catalog import build

            f_of = {c.expr: alltoall_throughput(build(c.expr)).throughput for c in cands}
        sel = select(cands, link, items, alltoall_bytes=args.alltoall_bytes or 0.0,
                     alltoall_weight=args.alltoall_weight, alltoall_f=lambda c: f_of.get(c.expr))
    except FinderError as exc:
        raise UsageError(str(exc)) from None
    from services.synthesis.search.finder import baseline_times

    out = {"best": {**_entry(sel.best, args.collective), "time_us": _time_of(sel, sel.best) * 1e6},
           "frontier": [{**_entry(c, args.collective), "time_us": t * 1e6} for c, t in sel.times_s],
           "baselines_time_us": {k: v * 1e6 for k, v in baseline_times(
               args.nodes, args.degree, link, items, args.alltoall_bytes or 0.0, args.alltoall_weight).items()}}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"best: {sel.best.expr} ({out['best']['time_us']:.1f} us for the workload)")
        for e in out["frontier"]:
            print(f"  {e['time_us']:>12.1f} us  steps {e['steps']:>3}  tau {e['tau']:.4f}  {e['expr']}")
        print("today's alternatives:")
        for name, us in out["baselines_time_us"].items():
            print(f"  {us:>12.1f} us  {name}")
    return 0


def _time_of(sel, cand) -> float:
    return next(t for c, t in sel.times_s if c is cand)


MAX_MODEL_FILE_BYTES = 16 << 20


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


def _hybrid_wanted(args) -> bool:
    """The multi-GPU hybrid-parallel model (docs/training.md) runs when asked for (hosts of several GPUs, a strategy,
    a global batch, a switched topology) or when the model exists only as a transformer description; otherwise
    `train` keeps the one-accelerator-per-node model of the paper's section 8.3."""
    from services.synthesis.evaluate.fabrics import SWITCHED
    from services.synthesis.evaluate.model_catalog import CATALOG
    from services.synthesis.evaluate.transformer import LLM_CATALOG

    if args.gpus_per_host != 1 or args.parallelism or args.global_batch is not None:
        return True
    if args.topology and args.topology.lower().replace("_", "-").replace("optimized", "optimised") in SWITCHED:
        return True
    key = args.model.lower()
    if key in LLM_CATALOG and key not in CATALOG:
        return True
    if key not in CATALOG:
        data = _model_file(args)
        from services.synthesis.evaluate.transformer import is_transformer_file

        return is_transformer_file(data)
    return False


def _model_file(args):
    from pathlib import Path

    path = Path(args.model)
    if not path.is_file():
        from services.synthesis.evaluate.model_catalog import CATALOG
        from services.synthesis.evaluate.transformer import LLM_CATALOG

        names = sorted(set(CATALOG) | set(LLM_CATALOG))
        raise UsageError(f"--model {args.model!r} is neither a catalogued model ({', '.join(names)}) nor a file")
    if path.stat().st_size > MAX_MODEL_FILE_BYTES:
        raise UsageError(f"{path}: model files are limited to {MAX_MODEL_FILE_BYTES >> 20} MB")
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable JSON model description ({exc})") from None


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
        data = _model_file(args)
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
    return Job(model, name, batch, device, args.nodes, args.gpus_per_host)


def cmd_train_hybrid(args) -> int:
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
            topologies = [_train_topology(args)]
    else:
        _frontier(args, "allreduce")
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
    print(f"{'iteration s':>11} {'TFLOP/s':>7} {'MFU':>5} {'tp':>3} {'pp':>3} {'dp':>4} {'ep':>3} {'z':>1} {'mb':>2} "
          f"{'vp':>2} {'rc':>4} {'bubble':>7} {'TP':>6} {'PP':>6} {'DP':>6} {'EP':>6} {'GB/GPU':>6}  topology")
    for e in ev.entries:
        label = e.fabric.expr if e.fabric.kind != "baseline" else f"{e.fabric.name}: {e.fabric.expr}"
        mark = "*" if e is ev.best else " "
        if e.result is None:
            print(f"{'-':>11} refused: {e.refused}  {mark}{label}")
            continue
        r, s, b = e.result, e.result.strategy, e.result.breakdown
        print(f"{r.iteration_s:>11.4f} {r.achieved_tflops_per_gpu:>7.1f} {r.mfu:>5.2f} {s.tp:>3} {s.pp:>3} {s.dp:>4} "
              f"{s.ep:>3} {s.zero:>1} {s.micro_batch:>2} {s.interleave:>2} {s.recompute[:4]:>4} {b.bubble:>7.3f} "
              f"{b.tp:>6.3f} {b.pp:>6.3f} {b.dp:>6.3f} {b.ep:>6.3f} {r.memory.total / 1e9:>6.1f} {mark}{label}")
    print(ev.why)
    return 0 if ev.best is not None else 2


def cmd_train(args) -> int:
    from services.synthesis.evaluate.training import evaluate_training
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.search.finder import MAX_DEGREE, MAX_NODES

    if (args.alpha_us is not None and args.alpha_us < 0) or (args.bandwidth_gbps is not None and
                                                             args.bandwidth_gbps <= 0):
        raise UsageError("--alpha-us must be >= 0 and --bandwidth-gbps > 0")
    if not (2 <= args.nodes <= MAX_NODES and 1 <= args.degree <= MAX_DEGREE):
        raise UsageError(f"N must be in 2..{MAX_NODES} and D in 1..{MAX_DEGREE}, got {args.nodes} and {args.degree}")
    if _hybrid_wanted(args):
        return cmd_train_hybrid(args)
    if args.alpha_us is None or args.bandwidth_gbps is None:
        raise UsageError("--alpha-us and --bandwidth-gbps are required (defaults apply to hosts of several GPUs)")
    model = _training_model(args)
    topologies = None
    if args.topology:
        topologies = [_train_topology(args)]
    else:
        _frontier(args, "allreduce")          # the frontier, with the CLI's disk cache of evaluated bases
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


def cmd_serve(args) -> int:
    import uvicorn

    from .api.app import create_app
    from .config import get_settings

    st = get_settings()
    mode = "embedded (SQLite + in-process worker)" if st.embedded else f"broker {st.broker_url.split('@')[-1]}"
    print(f"fabricplan: serving on http://{args.host}:{args.port} - {mode}; database "
          f"{st.sqlalchemy_url.split('@')[-1]}", file=sys.stderr)
    _warm_kernels()
    # the standard library's event loop, not uvloop: under 50 busy keep-alive connections uvloop left some of
    # them waiting (p99 24-124 ms on /healthz in most 4 s wrk runs, at the same throughput) where asyncio's
    # loop answers every connection in turn (p99 9-17 ms, bench.service; README)
    common = dict(host=args.host, port=args.port, log_level=args.log_level, access_log=False, loop="asyncio")
    if args.workers > 1:      # several processes: uvicorn needs the factory's import path
        if st.embedded:       # once, here: processes migrating one SQLite file at once race on CREATE TABLE
            from .store.db import migrate

            migrate(st.sqlalchemy_url)
        path = _multiprocess_metrics(st)
        print(f"fabricplan: {args.workers} processes; metrics summed over them in {path}", file=sys.stderr)
        uvicorn.run("services.api.app:create_app", factory=True, workers=args.workers, **common)
    else:
        uvicorn.run(create_app(st), **common)
    return 0


def _multiprocess_metrics(st) -> str:
    """prometheus_client's multiprocess mode for `serve --workers N`: every process writes its counters to
    files in PROMETHEUS_MULTIPROC_DIR (default: <data_dir>/prometheus) and a scrape sums them. The directory
    is emptied first: files left by an earlier run would be counted again."""
    import shutil
    from pathlib import Path

    path = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or Path(st.data_dir) / "prometheus")
    if path.exists():
        for entry in path.iterdir():
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)      # inherited by uvicorn's worker processes
    return str(path)


def _warm_kernels() -> None:
    """Load the compiled kernels (numba's on-disk cache; compiled on the first start after an install) so
    the first plan does not pay for it."""
    from services.compiler.warm import warm

    print(f"fabricplan: compiled kernels ready in {warm():.1f} s", file=sys.stderr)


def _train_topology(args):
    """The topology `train --topology EXPR` names, which must have the command's N nodes of degree d."""
    topo = _topology(args.topology)
    if (topo.nodes, topo.degree) != (args.nodes, args.degree):
        raise UsageError(f"{topo.expr} has {topo.nodes} nodes of degree {topo.degree}, not {args.nodes} and "
                         f"{args.degree}")
    return topo


def cmd_worker(args) -> int:
    from .config import get_settings

    st = get_settings()
    if st.embedded:
        raise UsageError("fabricplan worker needs FABRICPLAN_BROKER_URL (the embedded service runs its own worker)")
    from workers.app import celery_app

    argv = ["worker", f"--concurrency={args.concurrency}", f"--loglevel={args.log_level.upper()}",
            "--without-gossip", "--without-mingle"]
    if args.hostname:
        argv.append(f"--hostname={args.hostname}")
    _warm_kernels()           # before the pool forks: every child starts with the kernels loaded
    celery_app.worker_main(argv)
    return 0


def cmd_migrate(args) -> int:
    from .config import get_settings
    from .store.db import migrate

    st = get_settings()
    migrate(st.sqlalchemy_url, args.revision)
    print(f"fabricplan: database at revision {args.revision}", file=sys.stderr)
    if args.bootstrap_key:
        _bootstrap_key(st, args.bootstrap_key)
    return 0


def _bootstrap_key(st, path: str) -> None:
    """The first scheduler key of a deployment whose keys are required: created once (nothing happens when
    `path` exists), its secret written only to `path` (mode 0600, created exclusively), never printed."""
    from pathlib import Path

    from .api.auth import create_key
    from .store.db import session_scope

    target = Path(path)
    if target.exists():
        print(f"fabricplan: bootstrap key file {target} exists; no key created", file=sys.stderr)
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise UsageError(f"--bootstrap-key: cannot create {target}: {exc.strerror}") from None
    try:
        with session_scope(st.sqlalchemy_url) as s:
            secret, key = create_key(s, "bootstrap", "scheduler")
            key_id = key.id
            with os.fdopen(fd, "w") as fh:       # before the commit: a key is stored only once its file exists
                fh.write(secret + "\n")
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    print(f"fabricplan: created scheduler key {key_id}; its secret is in {target} (mode 0600)", file=sys.stderr)


def cmd_keys(args) -> int:
    from sqlalchemy import select

    from .api.auth import create_key
    from .config import get_settings
    from .store.db import migrate, session_scope
    from .store.models import ApiKey

    st = get_settings()
    migrate(st.sqlalchemy_url)
    with session_scope(st.sqlalchemy_url) as s:
        if args.action == "create":
            if not args.name or not args.role:
                raise UsageError("keys create needs --name and --role")
            try:
                secret, key = create_key(s, args.name, args.role, args.panel)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            print(json.dumps({"id": key.id, "name": key.name, "role": key.role, "panel_id": key.panel_id,
                              "key": secret, "note": "shown once; only its hash is stored"}, indent=2))
        elif args.action == "list":
            for k in s.scalars(select(ApiKey).order_by(ApiKey.created_at)):
                print(f"{k.id}  {k.role:<9} {k.panel_id or '-':<12} {'revoked' if k.revoked else 'active':<8} {k.name}")
        else:
            key = s.get(ApiKey, args.id or "")
            if key is None:
                raise UsageError(f"no API key with id {args.id!r}")
            key.revoked = True
            print(f"revoked {key.id}")
    return 0


def _compile_options(args):
    from .compiler.api import CompileOptions

    if args.runtime and args.dialect and args.runtime != args.dialect:
        raise UsageError(f"--runtime {args.runtime} and --dialect {args.dialect} disagree: --dialect is the old "
                         f"name of --runtime; give one of them")
    if args.format == "oneccl" and (args.runtime or args.dialect or "oneccl") != "oneccl":
        raise UsageError(f"--format oneccl writes the oneCCL format; --runtime {args.runtime or args.dialect} is an "
                         f"MSCCL runtime: give --runtime oneccl or --format msccl")
    runtime = args.runtime or args.dialect or ("oneccl" if args.format == "oneccl" else "executor")
    consolidate = {"auto": None, "yes": True, "no": False}[args.consolidate]
    return CompileOptions(runtime, proto=args.proto, inplace=args.inplace, min_bytes=args.min_bytes,
                          max_bytes=args.max_bytes, channels=args.channels, instances=args.instances,
                          max_chunks=args.max_chunks, consolidate=consolidate, max_steps=args.max_steps)


def _check_file(args) -> int:
    from .compiler.api import check_xml

    try:
        with open(args.expr, "rb") as fh:
            text = fh.read(1 << 30)
        if not text.isascii() or b"\r" in text:       # read as text (newlines translated), as always
            with open(args.expr, encoding="utf-8") as fh:
                text = fh.read(1 << 30)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {args.expr}: {exc}") from None
    head = text[:2000] if isinstance(text, str) else text[:2000].decode("ascii")
    fmt = "oneccl" if args.runtime == "oneccl" or "<oneccl_schedule" in head else "msccl"
    if fmt == "oneccl" and isinstance(text, bytes):
        text = text.decode("ascii")
    report = check_xml(text, fmt, runtime=None if fmt == "oneccl" else (args.runtime or args.dialect),
                       max_steps=args.max_steps)
    out = {"file": args.expr, "ok": report.ok, "runtime": report.dialect, "collective": report.collective,
           "ngpus": report.ngpus, "comm_steps": report.comm_steps, "xml_steps": report.xml_steps,
           "max_tb_steps": report.steps, "threadblocks": report.threadblocks, "simulated": report.simulated,
           "errors": [str(e) for e in report.errors[:10]], "warnings": [str(w) for w in report.warnings[:10]]}
    _emit(out, args.json)
    return 0 if report.ok else 1


@contextmanager
def progress_bar(desc: str, stream=None, unit: str = "candidate"):
    """Yield progress(message): each call advances a bar on `stream` (default stderr; tqdm) by one and shows the
    message, when it is a terminal; otherwise a no-op, so piped and `--json` output stays clean."""
    stream = sys.stderr if stream is None else stream
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield lambda message=None: None
        return
    from tqdm import tqdm

    # a candidate takes milliseconds to seconds: every one is drawn
    bar = tqdm(desc=desc, file=stream, unit=unit, leave=False, dynamic_ncols=True, mininterval=0.0)

    def progress(message=None) -> None:
        if message:
            bar.set_postfix_str(str(message)[:60], refresh=False)
        bar.update(1)

    try:
        yield progress
    finally:
        bar.close()


def cmd_compile(args) -> int:
    import os

    from .compiler.api import check_options, check_xml, compile_schedule
    from .compiler.errors import CompileError
    from services.synthesis.bfb.lp import ScheduleTooLarge
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.search.construct import construct
    from services.synthesis.schedule.ir import Collective

    if args.expr.endswith(".xml") and os.path.exists(args.expr):
        if not args.check:
            raise UsageError(f"{args.expr} is an XML file: add --check to validate and simulate it")
        return _check_file(args)
    topology = _topology(args.expr)
    collective = Collective.parse(args.collective)
    for name in ("channels", "instances", "max_chunks", "max_steps"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {v}")
    for name in ("min_bytes", "max_bytes"):
        v = getattr(args, name)
        if v is not None and v < 0:
            raise UsageError(f"--{name.replace('_', '-')} must not be negative, got {v}")
    link = None
    if args.alpha_us is not None or args.bandwidth_gbps is not None:
        if args.alpha_us is None or args.bandwidth_gbps is None or args.alpha_us < 0 or args.bandwidth_gbps <= 0:
            raise UsageError("give both --alpha-us (>= 0) and --bandwidth-gbps (> 0) for predicted times")
        link = LinkModel.from_units(args.alpha_us, args.bandwidth_gbps)
    if args.by_size:
        return _compile_set(args, collective, link)
    if args.links:
        raise UsageError("--links applies to --by-size")
    options = _compile_options(args)
    if not 1 <= args.gpus_per_host <= 64:
        raise UsageError(f"--gpus-per-host must be in 1..64, got {args.gpus_per_host}")
    if args.gpus_per_host != 1 and collective is Collective.ALLTOALL:
        raise UsageError("--gpus-per-host builds hierarchical allgather, reducescatter and allreduce schedules, "
                         "not alltoall")
    extra = {}
    try:
        if collective is Collective.ALLTOALL:
            from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule

            check_options(options, collective.value)        # refuse bad options before solving the LP
            a2a = alltoall_schedule(topology)
            schedule, topology = a2a.schedule, a2a.topology
            extra = {"schedule_tau": float(a2a.tau), "mcf_tau": a2a.mcf_tau}
        elif args.gpus_per_host > 1:
            from services.synthesis.schedule.hierarchical import hierarchical, phase_cost
            from services.synthesis.schedule.verify import verify

            if topology.nodes * args.gpus_per_host > 4096:
                raise UsageError(f"hierarchical schedules are limited to 4096 ranks, got {args.gpus_per_host} x "
                                 f"{topology.nodes}")
            schedule, topology = hierarchical(topology, args.gpus_per_host, collective)
            verify(schedule, topology).raise_if_invalid()
            extra = {"hierarchical": {"gpus_per_host": args.gpus_per_host, "hosts": topology.nodes // args.gpus_per_host,
                                      **phase_cost(schedule, args.gpus_per_host).to_dict()}}
        else:
            built = construct(args.expr, collective)
            schedule, topology = built.schedule, built.topology
        with progress_bar(f"compiling {collective.value} for {options.runtime}") as progress:
            art = compile_schedule(schedule, topology, options=options, link=link, sizes=args.size,
                                   deadline_s=args.timeout, progress=progress)
    except CompileError as exc:
        raise UsageError(str(exc), type="refused", limit=exc.limit, value=_jsonable(exc.value),
                         maximum=_jsonable(exc.maximum)) from None
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None
    summary = {**art.as_dict(), **extra}
    for key in ("predicted_time_us", "schedule_time_us"):
        if not summary.get(key):
            # times need message sizes (--size) and a link model (--alpha-us, --bandwidth-gbps): without them
            # there is nothing to show
            summary.pop(key, None)
    summary.pop("attempts", None)
    summary["attempts"] = len(art.attempts)
    code = 0
    if args.check:
        report = check_xml(art.xml, art.fmt, runtime=art.runtime if art.fmt == "msccl" else None,
                           max_steps=args.max_steps)
        summary["check"] = {"ok": report.ok, "simulated": report.simulated, "comm_steps": report.comm_steps,
                            "errors": [str(e) for e in report.errors[:5]]}
        code = 0 if report.ok else 1
    if args.output:
        with open(args.output, "wb") as fh:
            fh.write(art.xml_data)
        summary["output"] = args.output
        _emit(summary, args.json)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(art.xml_data)
        sys.stdout.buffer.flush()
        print(json.dumps(summary), file=sys.stderr)
    return code


def _compile_set(args, collective, link) -> int:
    """One XML per range of the schedule set, minBytes/maxBytes set so the runtime selects it by size."""
    import dataclasses
    import os

    from .compiler.api import check_xml, compile_schedule
    from .compiler.errors import CompileError
    from .compiler.size_sets import size_windows

    if not args.output:
        raise UsageError("--by-size writes one file per size range: give the directory with -o")
    if args.min_bytes is not None:
        raise UsageError("--by-size sets minBytes from the ranges; --max-bytes bounds the last legacy file only")
    args.alpha_us = 10.0 if args.alpha_us is None else args.alpha_us
    args.bandwidth_gbps = 100.0 if args.bandwidth_gbps is None else args.bandwidth_gbps
    args.size = 1.0
    topo, sset = _schedule_set(args, collective)
    base = _compile_options(args)
    try:
        windows = size_windows(base.runtime, [(r.min_bytes, r.max_bytes) for r in sset.ranges], args.max_bytes)
    except CompileError as exc:
        raise UsageError(str(exc)) from None
    os.makedirs(args.output, exist_ok=True)
    files, code = [], 0
    for i, (r, (lo, hi)) in enumerate(zip(sset.ranges, windows)):
        options = dataclasses.replace(base, min_bytes=lo, max_bytes=hi)
        try:
            art = compile_schedule(r.schedule, topo, options=options, link=link, deadline_s=args.timeout)
        except (CompileError, ValueError) as exc:
            raise UsageError(f"range [{r.min_bytes}, {r.max_bytes}) ({r.scheduler}): {exc}") from None
        ext = "xml"
        path = os.path.join(args.output, f"{collective.value}-{i:02d}-{r.min_bytes}-"
                                         f"{'inf' if r.max_bytes is None else r.max_bytes}.{ext}")
        with open(path, "wb") as fh:
            fh.write(art.xml_data)
        entry = {**r.as_dict(topo.degree), "file": path, "minBytes": lo, "maxBytes": hi, "lowering": art.lowering,
                 "xml_steps": art.xml_steps, "warnings": art.warnings}
        if args.check:
            report = check_xml(art.xml, art.fmt, runtime=art.runtime, max_steps=args.max_steps)
            entry["check"] = {"ok": report.ok, "simulated": report.simulated,
                              "errors": [str(e) for e in report.errors[:5]]}
            code = code or (0 if report.ok else 1)
        files.append(entry)
    if len(windows) < len(sset.ranges):
        first = sset.ranges[len(windows)].min_bytes
        skipped = {"min_bytes": first, "reason": f"the {base.runtime} runtime's files end at maxBytes {windows[-1][1]}"}
    else:
        skipped = None
    summary = {"expr": topo.expr, "collective": collective.value, "runtime": base.runtime, "files": files}
    if skipped:
        summary["not_written"] = skipped
    _emit(summary, args.json)
    return code


def _jsonable(v):
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


def _emit(summary: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    width = max(len(k) for k in summary)
    for k, v in summary.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            print(k)
            for x in v:
                print("  " + "  ".join(f"{a}={b}" for a, b in x.items()))
        else:
            print(f"{k:<{width}}  {v}")


def _add_cost_arguments(p: argparse.ArgumentParser) -> None:
    """The link model the schedulers are compared on (the paper's table units by default)."""
    p.add_argument("--alpha-us", type=float, default=10.0, help="link latency alpha (default 10 us)")
    p.add_argument("--bandwidth-gbps", type=float, default=100.0,
                   help="node egress bandwidth B; a link carries B/d (default 100 Gbps)")
    p.add_argument("--size", type=float, default=float(1 << 20),
                   help="collective size M in bytes: decides which schedule is faster (default 1 MiB)")
    p.add_argument("--greedy-chunks", type=int, default=1,
                   help="chunks per shard of the greedy (TACOS) scheduler (default 1)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fabricplan", description="Direct-connect topologies and collective schedules.")
    p.add_argument("--version", action="version", version="fabricplan 0.1.0")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bfb", help="BFB schedule of a topology expression, model-checked")
    b.add_argument("expr", help="topology expression, e.g. 'torus(4, 6)' or 'genkautz(4, 64)'")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--collective", default="allgather", help="allgather (default), reducescatter or allreduce")
    b.add_argument("--chunks", type=int, default=None, help="discrete BFB: P equal chunks per shard (App. E.2)")
    b.add_argument("--workers", type=int, default=None, help="processes for the per-receiver LPs (default: all cores)")
    b.add_argument("--no-shortcut", action="store_true", help="solve every node even on vertex-transitive topologies")
    b.add_argument("-o", "--output", help="write the served schedule as one compressed blob (.npz)")
    b.add_argument("--links", help="JSON file of per-arc alpha_us / bandwidth_gbps: heterogeneous BFB (LP (14))")
    _add_cost_arguments(b)
    b.set_defaults(func=cmd_bfb)

    sc = sub.add_parser("schedule", help="the schedule the finder would use for an expression, model-checked")
    sc.add_argument("expr")
    sc.add_argument("--collective", default="allgather", help="allgather, reducescatter, allreduce or alltoall")
    sc.add_argument("--steps", type=int, default=None, help="all-to-all: comm steps of the LP (default: the diameter "
                                                              "up to 2 more, until the MCF bound is reached)")
    sc.add_argument("--chunks", type=int, default=None, help="all-to-all: chunks per destination block")
    sc.add_argument("--json", action="store_true")
    sc.add_argument("-o", "--output", help="write the served schedule as one compressed blob (.npz)")
    sc.add_argument("--links", help="JSON file of per-arc alpha_us / bandwidth_gbps (the `bfb --links` format)")
    sc.add_argument("--by-size", action="store_true",
                    help="the schedule set: size ranges, each with the schedule fastest over it")
    _add_cost_arguments(sc)
    sc.set_defaults(func=cmd_schedule)

    fr = sub.add_parser("frontier", help="Pareto-efficient topologies for N nodes of degree d")
    fr.add_argument("nodes", type=int)
    fr.add_argument("degree", type=int)
    fr.add_argument("--bidirectional", action="store_true", help="only topologies duplex cabling can realise")
    fr.add_argument("--collective", default="allgather",
                    help="allgather (default), reducescatter or allreduce: whose (steps, tau) the frontier is on")
    fr.add_argument("--json", action="store_true")
    fr.set_defaults(func=cmd_frontier)

    se = sub.add_parser("select", help="the frontier topology fastest for a workload")
    se.add_argument("nodes", type=int)
    se.add_argument("degree", type=int)
    se.add_argument("--alpha-us", type=float, required=True)
    se.add_argument("--bandwidth-gbps", type=float, required=True, help="node egress bandwidth B")
    se.add_argument("--size", type=float, nargs="+", required=True, help="collective sizes in bytes")
    se.add_argument("--weight", type=float, nargs="+", help="one weight per size (default 1)")
    se.add_argument("--collective", default="allreduce")
    se.add_argument("--alltoall-bytes", type=float, default=None, help="bytes per node of an all-to-all")
    se.add_argument("--alltoall-weight", type=float, default=0.0, help="all-to-alls per unit of --weight")
    se.add_argument("--bidirectional", action="store_true")
    se.add_argument("--json", action="store_true")
    se.set_defaults(func=cmd_select)

    tr = sub.add_parser("train", help="a training job's iteration time on the frontier and the baselines")
    tr.add_argument("nodes", type=int)
    tr.add_argument("degree", type=int)
    tr.add_argument("--model", required=True, help="a catalogued model (e.g. resnet50, gpt2-small, switch-c-2048) "
                                                    "or a JSON model description file")
    tr.add_argument("--alpha-us", type=float, default=None,
                    help="per-step latency (required with one GPU per node; default 5 with --gpus-per-host)")
    tr.add_argument("--bandwidth-gbps", type=float, default=None,
                    help="node (host) egress bandwidth B over its DEGREE NICs (required with one GPU per node; "
                         "default DEGREE x 200 with --gpus-per-host)")
    tr.add_argument("--topology", help="simulate this expression instead of the frontier, or a switched network: "
                                       "fat-tree, fat-tree-2to1, fat-tree-4to1, rail-optimised")
    tr.add_argument("--device", default=None, help="device profile: a100 (default), h100; with several GPUs per "
                                                   "host also h200, b200")
    tr.add_argument("--gpus-per-host", type=int, default=1,
                    help="GPUs per host joined by a scale-up domain (default 1: the paper's one accelerator per node)")
    tr.add_argument("--global-batch", type=int, default=None, help="sequences per iteration (hybrid parallelism)")
    tr.add_argument("--parallelism", default=None,
                    help="auto (search) or tp=8,pp=8,dp=16[,ep=..][,zero=..][,mb=..][,vp=..][,recompute=..]: "
                         "given keys are fixed, the others searched")
    tr.add_argument("--batch", type=int, default=None, help="samples per node (catalogued models)")
    tr.add_argument("--alltoall-cost", choices=["mcf", "schedule"], default="mcf",
                    help="all-to-all time from the MCF throughput (default) or a verified all-to-all schedule")
    tr.add_argument("--bidirectional", action="store_true", help="only frontier topologies duplex cabling can realise")
    tr.add_argument("--json", action="store_true")
    tr.set_defaults(func=cmd_train)

    co = sub.add_parser("compile", help="compile an expression's schedule to the XML a runtime loads (docs/runtimes.md)",
                        description="Compile the schedule of EXPR for a runtime, fitting its limits (exit 2 with the "
                                    "limit when nothing fits). With --check on an existing FILE.xml: validate and "
                                    "simulate that file for --runtime.")
    co.add_argument("expr", help="topology expression, or with --check an XML file to validate")
    co.add_argument("--collective", default="allreduce",
                    help="allgather, reducescatter, allreduce (default) or alltoall (built by the all-to-all LP)")
    co.add_argument("--runtime", choices=["executor", "rccl", "legacy", "oneccl"], default=None,
                    help="msccl-executor-nccl (default), RCCL, microsoft/msccl, or the oneCCL format")
    co.add_argument("--format", choices=["msccl", "oneccl"], default="msccl", help="msccl (default) or oneccl")
    co.add_argument("--dialect", choices=["executor", "rccl", "legacy"], default=None, help="old name of --runtime")
    co.add_argument("--proto", choices=["Simple", "LL", "LL128"], default=None, help="NCCL protocol (default Simple)")
    co.add_argument("--inplace", choices=["out", "in", "both"], default=None,
                    help="calls the file serves (default: both on executor/RCCL; in for allreduce, out otherwise on "
                         "microsoft/msccl)")
    co.add_argument("--min-bytes", type=int, default=None, help="smallest message size that selects the file")
    co.add_argument("--max-bytes", type=int, default=None,
                    help="largest message size (executor/RCCL: 0 = unbounded, the default; microsoft/msccl: sizes "
                         "below it, default 134217728)")
    co.add_argument("--channels", type=int, default=None, help="channels a link's messages spread over (default: fit)")
    co.add_argument("--instances", type=int, default=1, help="copies of the program, each on 1/instances of every chunk")
    co.add_argument("--max-chunks", type=int, default=64, help="bound on chunks per shard when lowering")
    co.add_argument("--consolidate", choices=["auto", "yes", "no"], default="auto", help="scratch consolidation")
    co.add_argument("--max-steps", type=int, default=None, help="steps per thread block of a custom executor build")
    co.add_argument("--alpha-us", type=float, default=None, help="link latency for predicted times")
    co.add_argument("--bandwidth-gbps", type=float, default=None, help="node bandwidth for predicted times")
    co.add_argument("--size", type=float, nargs="+", default=None, help="message sizes in bytes for predicted times")
    co.add_argument("--timeout", type=float, default=None, help="give up the fit search after this many seconds")
    co.add_argument("--gpus-per-host", type=int, default=1,
                    help="hosts of G GPUs (scale-up domain; NIC k on GPU k mod G): a hierarchical schedule over "
                         "G x N ranks (allgather, reducescatter, allreduce)")
    co.add_argument("-o", "--output", help="write the XML here (default: stdout, summary on stderr)")
    co.add_argument("--check", action="store_true", help="validate and simulate the XML on CPU")
    co.add_argument("--by-size", action="store_true",
                    help="compile the schedule set: one XML per size range into the directory -o names")
    co.add_argument("--links", help="with --by-size: JSON file of per-arc alpha_us / bandwidth_gbps")
    co.add_argument("--json", action="store_true")
    co.set_defaults(func=cmd_compile)

    sv = sub.add_parser("serve", help="run the HTTP API (and the embedded worker unless a broker is configured)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--log-level", default="info")
    sv.add_argument("--workers", type=int, default=1, help="API processes (each embedded one runs its own worker)")
    sv.set_defaults(func=cmd_serve)

    wk = sub.add_parser("worker", help="run a Celery worker for the scaled deployment (needs FABRICPLAN_BROKER_URL)")
    wk.add_argument("--concurrency", type=int, default=2)
    wk.add_argument("--hostname", default=None)
    wk.add_argument("--log-level", default="info")
    wk.set_defaults(func=cmd_worker)

    mg = sub.add_parser("migrate", help="apply database migrations (Alembic)")
    mg.add_argument("--revision", default="head")
    mg.add_argument("--bootstrap-key", metavar="FILE", default=None,
                    help="then create a scheduler key, its secret written only to FILE (mode 0600), unless FILE "
                         "exists (the compose deployment's first key)")
    mg.set_defaults(func=cmd_migrate)

    ky = sub.add_parser("keys", help="manage API keys (scheduler, agent bound to a panel, viewer)")
    ky.add_argument("action", choices=["create", "list", "revoke"])
    ky.add_argument("--name")
    ky.add_argument("--role", choices=["scheduler", "agent", "viewer"])
    ky.add_argument("--panel", help="the panel an agent key is bound to")
    ky.add_argument("--id", help="the key to revoke")
    ky.set_defaults(func=cmd_keys)
    return p





class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors (unknown option, bad choice) follow --json like every other error."""

    json_errors = False

    def error(self, message: str):
        if _Parser.json_errors:
            print(json.dumps(error_object(f"{self.prog}: {message}")), file=sys.stderr)
            raise SystemExit(2)
        super().error(message)


def main(argv: list[str] | None = None) -> int:
    """Run one command; a closed stdout (`| head`) ends it with status 141 and no traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        _silence_stdout()
        return SIGPIPE_EXIT


def _silence_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _main(argv: list[str] | None) -> int:
    from services.runtime import tune_gc

    tune_gc()
    argv = sys.argv[1:] if argv is None else list(argv)
    _Parser.json_errors = "--json" in argv
    parser = build_parser()
    args = parser.parse_args(argv)
    as_json = bool(getattr(args, "json", False))
    try:
        if getattr(args, "collective", None) is not None:
            from services.synthesis.schedule.ir import Collective
            try:
                Collective.parse(args.collective)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        code = args.func(args)
        sys.stdout.flush()                    # a closed pipe surfaces here, inside the handler in main
        return code
    except UsageError as exc:
        _report_error(str(exc), as_json, exc.type, **exc.fields)
        return 2


if __name__ == "__main__":
    sys.exit(main())
