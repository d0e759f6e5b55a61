"""Speed of the dependency-driven time (DESIGN section 2, `services.synthesis.schedule.dependency`) at N = 1024.

    python -m bench.dependency

For BFB's allgather and allreduce on two 1024-node graphs, and for one heterogeneous greedy schedule, the bench
prints the transfers, the atom-level entries (a transfer covers the atoms of its source between its chunk
bounds), the seconds to number the locations (first pass) and to walk the longest path (second pass, what each
further size costs: `dependency_curve` prices a schedule 2k - 1 times for k pieces), best of three after one warm
call, and transfers per second of both passes together. The step-synchronous price of the same schedule (its
per-step link loads, `LinkCosts.time`) is timed beside it for scale.
"""
from __future__ import annotations

import time

import numpy as np

REPEAT = 3


def _best(fn) -> float:
    fn()
    best = float("inf")
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    from services.synthesis.bfb.greedy import greedy_allgather
    from services.synthesis.bfb.lp import bfb_schedule
    from services.synthesis.schedule.cost import LinkModel
    from services.synthesis.schedule.dependency import _Priced
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.schedule.links import LinkCosts
    from services.synthesis.topology.catalog import build

    link = LinkModel.from_units(10, 100)
    rows = []
    for expr in ("genkautz(4, 1024)", "torus(32, 32)"):
        g = build(expr)
        costs = LinkCosts.uniform(g, link)
        for c in (Collective.ALLGATHER, Collective.ALLREDUCE):
            rows.append((expr, c.value, bfb_schedule(g, c), costs))
    g = build("genkautz(4, 1024)")
    rng = np.random.default_rng(0)
    bw = np.full(g.arcs, 25e9 / 8)
    bw[rng.choice(g.arcs, 6, replace=False)] = 5e9 / 8
    costs = LinkCosts(g, np.full(g.arcs, 10e-6), bw)
    rows.append(("genkautz(4, 1024) 6 slow", "greedy ag", greedy_allgather(g, chunks=1).schedule, costs))
    print(f"{'graph':<26} {'schedule':<10} {'transfers':>10} {'entries':>10} {'prep s':>8} {'path s':>8} "
          f"{'M transfers/s':>13} {'barrier s':>9}")
    for expr, name, s, costs in rows:
        prep = _best(lambda: _Priced(s, costs, None))
        priced = _Priced(s, costs, None)
        path = _best(lambda: priced.at(1 << 20))
        barrier = _best(lambda: costs.time(s, 1 << 20))
        entries = int(priced.args[4][-1])
        print(f"{expr:<26} {name:<10} {s.transfers:>10} {entries:>10} {prep:>8.3f} {path:>8.3f} "
              f"{s.transfers / (prep + path) / 1e6:>13.2f} {barrier:>9.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
