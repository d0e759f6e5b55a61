"""`fabricplan bfb EXPR`: the BFB schedule of a topology expression (the paper's section 4, LP (5)/(14)), compared
with the greedy scheduler on the same link costs and model-checked; the fastest verified one is served.
"""
from __future__ import annotations

import time

from .common import UsageError, add_cost_arguments, emit
from .inputs import build_topology, compare, comparison_summary, link_costs

__all__ = ["register", "run"]


def run(args) -> int:
    from services.synthesis.schedule.ir import Collective

    topo = build_topology(args.expr)
    collective = Collective.parse(args.collective)
    if collective is Collective.ALLTOALL:
        raise UsageError("BFB builds allgather, reduce-scatter and allreduce schedules; for an all-to-all use "
                         "`fabricplan schedule EXPR --collective alltoall`")
    costs = link_costs(args, topo)
    if args.chunks is not None and args.chunks < 1:
        raise UsageError(f"--chunks must be a positive integer, got {args.chunks}")
    schedulers = ("bfb", "greedy") if not args.links else ("bfb-hetero", "bfb", "greedy")
    t0 = time.perf_counter()
    opts = dict(workers=args.workers, shortcut=not args.no_shortcut, chunks=args.chunks)
    comparison = compare(topo, collective, costs, args, schedulers, bfb_options=opts)
    if comparison is None:
        return 1
    emit(comparison_summary(topo, collective, comparison, time.perf_counter() - t0, args.output), args.json)
    return 0


def register(sub) -> None:
    """Add the `bfb` sub-command to the parser's subparsers."""
    p = sub.add_parser("bfb", help="BFB schedule of a topology expression, model-checked")
    p.add_argument("expr", help="topology expression, e.g. 'torus(4, 6)' or 'genkautz(4, 64)'")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--collective", default="allgather", help="allgather (default), reducescatter or allreduce")
    p.add_argument("--chunks", type=int, default=None, help="discrete BFB: P equal chunks per shard (App. E.2)")
    p.add_argument("--workers", type=int, default=None, help="processes for the per-receiver LPs (default: all cores)")
    p.add_argument("--no-shortcut", action="store_true", help="solve every node even on vertex-transitive topologies")
    p.add_argument("-o", "--output", help="write the served schedule as one compressed blob (.npz)")
    p.add_argument("--links", help="JSON file of per-arc alpha_us / bandwidth_gbps: heterogeneous BFB (LP (14))")
    add_cost_arguments(p)
    p.set_defaults(func=run)
