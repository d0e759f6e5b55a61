"""`fabricplan select N D`: the frontier topology fastest for a workload of collective sizes and weights (the
paper's section 5.2, equation (1)), beside today's alternatives (the baselines).
"""
from __future__ import annotations

import json

from .common import UsageError
from .inputs import entry_of, frontier_of

__all__ = ["register", "run"]


def run(args) -> int:
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.evaluate.workload_selection import select_workload
    from services.synthesis.search.finder import FinderError, WorkloadItem
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
        sel, _ = select_workload(frontier_of(args), link, items, alltoall_bytes=args.alltoall_bytes or 0.0,
                                 alltoall_weight=args.alltoall_weight)
    except FinderError as exc:
        raise UsageError(str(exc)) from None
    from services.synthesis.evaluate.workload_baselines import baseline_times

    out = {"best": {**entry_of(sel.best, args.collective), "time_us": _time_of(sel, sel.best) * 1e6},
           "frontier": [{**entry_of(c, args.collective), "time_us": t * 1e6} for c, t in sel.times_s],
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


def register(sub) -> None:
    """Add the `select` sub-command to the parser's subparsers."""
    p = sub.add_parser("select", help="the frontier topology fastest for a workload")
    p.add_argument("nodes", type=int)
    p.add_argument("degree", type=int)
    p.add_argument("--alpha-us", type=float, required=True)
    p.add_argument("--bandwidth-gbps", type=float, required=True, help="node egress bandwidth B")
    p.add_argument("--size", type=float, nargs="+", required=True, help="collective sizes in bytes")
    p.add_argument("--weight", type=float, nargs="+", help="one weight per size (default 1)")
    p.add_argument("--collective", default="allreduce")
    p.add_argument("--alltoall-bytes", type=float, default=None, help="bytes per node of an all-to-all")
    p.add_argument("--alltoall-weight", type=float, default=0.0, help="all-to-alls per unit of --weight")
    p.add_argument("--bidirectional", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
