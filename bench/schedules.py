"""Served schedule sets against the cut bound, BFB and BFB without the slow links (issue 26).

    python -m bench.schedules            # ten graphs and the 72-node revision, JSON lines then a table
    python -m bench.schedules --quick    # the three smallest graphs

For every graph and collective (allgather, allreduce) the schedule set is built (`bfb.schedule_sets`: BFB,
LP (14), BFB without the slow links, greedy, pipelined trees) and at 1 KiB, 1 MiB and 1 GiB the bench prints
the served time, the cut bound (bandwidth term only, `forest.packing.cut_bound_seconds`; for an allreduce the
reduce-scatter's bound on G^T plus the allgather's), BFB's LP (1) schedule priced on the same links, and BFB on
the graph without its slower links (None when the links are uniform or the fast ones do not connect every
node). Links: 25 Gbps and 10 us unless said; "slow" arcs are 5 Gbps (or as listed). Every served schedule is
model-checked by `schedule_sets`; times are measured from the schedules (`LinkCosts.time`).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

GBPS = 1e9 / 8
SIZES = (1 << 10, 1 << 20, 1 << 30)


def _slow(g, count: int, seed: int, gbps: float = 5.0) -> dict:
    rng = np.random.default_rng(seed)
    arcs = rng.choice(g.arcs, count, replace=False)
    return {int(a): gbps for a in arcs}


def cases():
    """(label, expression, {arc index: Gbps} of the slow links, or a callable building it)."""
    def torus67(g):                      # the case: three 5 Gbps links, one node's in-links at 12.5
        slow = {int(g.arc_index([0], [1], [0])[0]): 5.0, int(g.arc_index([8], [9], [0])[0]): 5.0,
                int(g.arc_index([20], [27], [0])[0]): 5.0}
        for a in np.flatnonzero(g.heads == 30):
            slow[int(a)] = 12.5
        return slow

    return [
        ("uniform", "torus(3, 4)", lambda g: {}),
        ("uniform", "torus(6, 7)", lambda g: {}),
        ("uniform", "genkautz(4, 64)", lambda g: {}),
        ("degraded", "remove(torus(6, 7), 0>1, 8>9, 20>27)", lambda g: {}),
        ("degraded", "remove(genkautz(4, 64), 0>60, 17>57, 40>31)", lambda g: {}),
        ("heterogeneous", "torus(3, 4)", lambda g: _slow(g, 3, 1)),
        ("heterogeneous", "torus(6, 7)", torus67),
        ("heterogeneous", "genkautz(4, 52)", lambda g: _slow(g, 2, 2, 2.5)),
        ("heterogeneous", "genkautz(4, 64)", lambda g: _slow(g, 6, 3)),
        ("heterogeneous", "torus(8, 8)", lambda g: _slow(g, 6, 4)),
        ("revision", "remove(genkautz(4, 72), 0>68, 24>44, 48>20)", lambda g: {}),
    ]


def run_case(label: str, expr: str, slow_fn) -> dict:
    from services.synthesis.bfb.lp import bfb_allgather
    from services.synthesis.bfb.schedule_sets import schedule_sets
    from services.synthesis.bfb.fast_links import FastLinksUnavailable, bfb_fast_links
    from services.synthesis.forest.packing import cut_bound_seconds
    from services.synthesis.schedule.ir import Collective, allreduce
    from services.synthesis.schedule.links import LinkCosts
    from services.synthesis.topology.catalog import build

    g = build(expr)
    slow = slow_fn(g)
    bw = np.full(g.arcs, 25 * GBPS)
    for a, gbps in slow.items():
        bw[a] = gbps * GBPS
    costs = LinkCosts(g, np.full(g.arcs, 10e-6), bw)
    gt = g.transpose()
    ct = costs.transposed(gt)
    t0 = time.perf_counter()
    sets = schedule_sets(g, costs, [Collective.ALLGATHER, Collective.ALLREDUCE], greedy_chunks=(1,))
    built = time.perf_counter() - t0
    bfb_ag = bfb_allgather(g).schedule
    bfb_rs = bfb_allgather(gt).schedule.reverse(topology=g.expr)
    try:
        fast_ag = bfb_fast_links(costs)
        fast_rs = bfb_fast_links(ct).reverse(topology=g.expr)
    except FastLinksUnavailable:
        fast_ag = fast_rs = None
    out = {"label": label, "expr": expr, "nodes": g.nodes, "slow_links": len(slow), "set_seconds": round(built, 2),
           "rows": []}
    for c, ss in sets.items():
        ref = bfb_ag if c is Collective.ALLGATHER else allreduce(bfb_rs, bfb_ag)
        fast = None if fast_ag is None else (fast_ag if c is Collective.ALLGATHER else allreduce(fast_rs, fast_ag))
        for m in SIZES:
            bound = cut_bound_seconds(g, bw, m)
            if c is Collective.ALLREDUCE:
                bound += cut_bound_seconds(gt, ct.bandwidth_Bps, m)
            r = ss.at(m)
            out["rows"].append({"collective": c.value, "size": m, "served_us": r.time_s(m) * 1e6,
                                "scheduler": r.scheduler, "steps": r.steps, "cut_bound_us": bound * 1e6,
                                "bfb_us": costs.time(ref, m) * 1e6,
                                "bfb_fast_links_us": None if fast is None else costs.time(fast, m) * 1e6,
                                "ranges": len(ss.ranges)})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    todo = cases()[:3] if args.quick else cases()
    results = []
    for label, expr, fn in todo:
        res = run_case(label, expr, fn)
        print(json.dumps(res), flush=True)
        results.append(res)
    print(f"\n{'graph':<48} {'coll':<9} {'size':>6} {'served':>11} {'scheduler':<22} {'bound':>11} {'bfb':>11} "
          f"{'no-slow':>11}")
    names = {1 << 10: "1KiB", 1 << 20: "1MiB", 1 << 30: "1GiB"}
    for res in results:
        for row in res["rows"]:
            fast = row["bfb_fast_links_us"]
            print(f"{res['label'][:5] + ' ' + res['expr']:<48} {row['collective']:<9} {names[row['size']]:>6} "
                  f"{row['served_us']:>11.1f} {row['scheduler']:<22} {row['cut_bound_us']:>11.1f} "
                  f"{row['bfb_us']:>11.1f} {'-' if fast is None else f'{fast:11.1f}':>11}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
