"""`fabricplan schedule EXPR`: the schedule the finder would use for an expression (its construction, section 5),
compared with the other schedulers and model-checked; `--by-size` the schedule set by message size, `--collective
alltoall` the all-to-all LP's schedule.
"""
from __future__ import annotations

import time

from .common import UsageError, add_cost_arguments, emit
from .inputs import build_topology, compare, comparison_summary, link_costs, schedule_set

__all__ = ["register", "run"]


def run(args) -> int:
    from services.synthesis.bfb.lp import ScheduleTooLarge
    from services.synthesis.search.construct import construct
    from services.synthesis.schedule.ir import Collective

    topo = build_topology(args.expr)               # validates the expression with a clear message
    collective = Collective.parse(args.collective)
    if collective is Collective.ALLTOALL:
        if args.by_size:
            raise UsageError("--by-size covers allgather, reducescatter and allreduce")
        return _schedule_alltoall(args, topo)
    if args.steps is not None or args.chunks is not None:
        raise UsageError("--steps and --chunks apply to --collective alltoall")
    if args.by_size:
        return _schedule_by_size(args, collective)
    try:
        built = construct(args.expr, collective)
    except (ScheduleTooLarge, ValueError) as exc:
        raise UsageError(str(exc)) from None
    costs = link_costs(args, built.topology)
    prebuilt = {"construction": {collective: (built.schedule, built.seconds, built.prediction.tau)}}
    t0 = time.perf_counter()
    # on per-link costs the heterogeneous schedulers compete too (LP (14), trees, BFB without slow links)
    schedulers = ("greedy",) if not args.links else ("greedy", "bfb-hetero", "trees", "bfb-fast")
    comparison = compare(built.topology, collective, costs, args, schedulers, prebuilt=prebuilt)
    if comparison is None:
        return 1
    summary = comparison_summary(built.topology, collective, comparison,
                                  built.seconds + time.perf_counter() - t0, args.output)
    # the finder's price of the expression (search.pricing) against the schedule its construction built
    report = comparison.reports["construction"]
    summary["method"] = built.method
    summary["predicted_steps"] = built.prediction.steps
    summary["predicted_tau_exact"] = str(built.prediction.tau)
    summary["prediction_matches"] = report.ok and (report.steps, report.tau) == (built.prediction.steps,
                                                                                built.prediction.tau)
    emit(summary, args.json)
    return 0


def _schedule_by_size(args, collective) -> int:
    if args.output:
        raise UsageError("-o writes one schedule; with --by-size use `fabricplan compile EXPR --by-size -o DIR`")
    topo, sset = schedule_set(args, collective)
    emit({"expr": topo.expr, "nodes": topo.nodes, **sset.as_dict()}, args.json)
    return 0


def _schedule_alltoall(args, topo) -> int:
    """The all-to-all schedule, priced for D = --size bytes per node on the uniform links or the --links table:
    `time_us` dependency-driven (schedule.dependency), `barrier_time_us` step-synchronous (LinkCosts.time)."""
    from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule
    from services.synthesis.schedule.dependency import dependency_time

    costs = link_costs(args, topo)            # validated before the LP runs
    try:
        result = alltoall_schedule(topo, steps=args.steps, chunks=args.chunks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    summary = result.to_dict()
    summary["size_bytes"] = args.size
    summary["time_us"] = dependency_time(result.schedule, costs, args.size) * 1e6
    summary["barrier_time_us"] = costs.time(result.schedule, args.size) * 1e6
    if args.output:
        with open(args.output, "wb") as fh:
            fh.write(result.schedule.to_bytes())
        summary["output"] = args.output
    emit(summary, args.json)
    return 0


def register(sub) -> None:
    """Add the `schedule` sub-command to the parser's subparsers."""
    p = sub.add_parser("schedule", help="the schedule the finder would use for an expression, model-checked")
    p.add_argument("expr")
    p.add_argument("--collective", default="allgather", help="allgather, reducescatter, allreduce or alltoall")
    p.add_argument("--steps", type=int, default=None, help="all-to-all: comm steps of the LP (default: the diameter "
                                                              "up to 2 more, until the MCF bound is reached)")
    p.add_argument("--chunks", type=int, default=None, help="all-to-all: chunks per destination block")
    p.add_argument("--json", action="store_true")
    p.add_argument("-o", "--output", help="write the served schedule as one compressed blob (.npz)")
    p.add_argument("--links", help="JSON file of per-arc alpha_us / bandwidth_gbps (the `bfb --links` format)")
    p.add_argument("--by-size", action="store_true",
                    help="the schedule set: size ranges, each with the schedule fastest over it")
    add_cost_arguments(p)
    p.set_defaults(func=run)
