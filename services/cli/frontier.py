"""`fabricplan frontier N D`: the Pareto-efficient topologies of N nodes of degree d on (steps, tau) (the paper's
section 5, Table 2).
"""
from __future__ import annotations

import json

from .inputs import entry_of, frontier_of

__all__ = ["register", "run"]


def run(args) -> int:
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.search.finder import bounds

    entries = [entry_of(c, args.collective) for c in frontier_of(args)]
    b = bounds(args.nodes, args.degree, Collective.parse(args.collective))
    if args.json:          # an object: the frontier with the lower bounds it is measured against (section 5)
        print(json.dumps({"nodes": args.nodes, "degree": args.degree,
                          "collective": Collective.parse(args.collective).value, "bidirectional": args.bidirectional,
                          "bounds": {"steps": int(b["steps"]), "tau": float(b["tau"]), "tau_exact": str(b["tau"])},
                          "entries": entries}, indent=2))
        return 0
    print(f"Pareto frontier for N = {args.nodes}, d = {args.degree}, {Collective.parse(args.collective).value}"
          f"{' (bidirectional only)' if args.bidirectional else ''}; bound: {b['steps']} steps, "
          f"tau {float(b['tau']):.4f}")
    print(f"{'steps':>5} {'tau':>8} {'D':>4}  {'BW':>3} {'Moore':>5}  expr")
    for e in entries:
        print(f"{e['steps']:>5} {e['tau']:>8.4f} {str(e['diameter']):>4}  {'yes' if e['bw_optimal'] else '':>3} "
              f"{'yes' if e['moore_optimal'] else '':>5}  {e['expr']}")
    return 0


def register(sub) -> None:
    """Add the `frontier` sub-command to the parser's subparsers."""
    p = sub.add_parser("frontier", help="Pareto-efficient topologies for N nodes of degree d")
    p.add_argument("nodes", type=int, help="N, the number of nodes")
    p.add_argument("degree", type=int, help="d, each node's degree")
    p.add_argument("--bidirectional", action="store_true", help="only topologies duplex cabling can realise")
    p.add_argument("--collective", default="allgather",
                    help="allgather (default), reducescatter or allreduce: whose (steps, tau) the frontier is on")
    p.add_argument("--json", action="store_true", help="an object on stdout: N, d, the collective, the bounds "
                   "(steps, tau) and the entries")
    p.set_defaults(func=run)
