"""Command-line input read into the synthesis library's objects, shared by several commands: a topology
expression sized before it is built, per-arc link costs (--alpha-us/--bandwidth-gbps or a --links file), the
frontier of (N, d) with the CLI's disk cache, an expression's schedule set, the schedulers compared on one
topology, and a model file read within its size limit. Every bad input raises UsageError.
"""
from __future__ import annotations

import json
import math

from .common import UsageError, progress_bar, report_error

__all__ = ["MAX_LINKS_FILE_BYTES", "MAX_MODEL_FILE_BYTES", "build_topology", "compare", "comparison_summary",
           "entry_of", "frontier_of", "link_costs", "model_file", "schedule_set", "train_topology"]

MAX_LINKS_FILE_BYTES = 64 << 20


MAX_MODEL_FILE_BYTES = 16 << 20


def build_topology(expr: str, schedule: bool = True):
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


def link_costs(args, topo):
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


def frontier_of(args, collective: str | None = None):
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


def entry_of(c, collective: str) -> dict:
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.finder import frontier_entry

    return frontier_entry(c, Collective.parse(collective))


def schedule_set(args, collective):
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
    costs = link_costs(args, built.topology)
    try:
        sets = schedule_sets(built.topology, costs, [collective], prebuilt={"construction": built.schedule})
    except ScheduleInvalid as exc:
        raise UsageError(f"no schedule passed the model checker: {exc}") from None
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return built.topology, sets[collective]


def compare(topo, collective, costs, args, schedulers, **kw):
    """Build every scheduler's candidate, verify them all, serve the fastest verified one."""
    from services.synthesis.bfb.compare import build_candidates, choose
    from services.synthesis.bfb.lp import ScheduleTooLarge
    from services.synthesis.schedule.verify import ScheduleInvalid

    try:
        cands = build_candidates(topo, costs, args.size, collectives=(collective,), schedulers=schedulers,
                                 greedy_chunks=args.greedy_chunks, **kw)[collective]
        return choose(topo, collective, cands, args.size, verify_mode="all")
    except ScheduleInvalid as exc:
        report_error(f"no schedule passed the model checker: {exc}", getattr(args, "json", False), "unverified")
        return None
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None


def comparison_summary(topo, collective, comparison, seconds: float, output: str | None) -> dict:
    """The chosen schedule's summary (DESIGN section 5 fields) plus every scheduler's cost."""
    from services.synthesis.schedule.report import schedule_summary

    chosen = comparison.chosen
    summary = schedule_summary(topo, comparison.reports[chosen.scheduler], seconds, collective)
    summary["scheduler"] = chosen.scheduler
    summary["size_bytes"] = comparison.size_bytes
    summary["time_us"] = chosen.time_s * 1e6                 # dependency-driven: what the runtimes realise
    summary["barrier_time_us"] = chosen.barrier_time_s * 1e6  # step-synchronous price (the paper's)
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


def train_topology(args):
    """The topology `train --topology EXPR` names, which must have the command's N nodes of degree d."""
    topo = build_topology(args.topology)
    if (topo.nodes, topo.degree) != (args.nodes, args.degree):
        raise UsageError(f"{topo.expr} has {topo.nodes} nodes of degree {topo.degree}, not {args.nodes} and "
                         f"{args.degree}")
    return topo


def model_file(args):
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
