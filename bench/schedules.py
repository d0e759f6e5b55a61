"""Served schedule sets against the cut bound, BFB and BFB without the slow links.

    python -m bench.schedules            # ten graphs and the 72-node revision, JSON lines then a table
    python -m bench.schedules --quick    # the three smallest graphs
    python -m bench.schedules --targets  # TACOS and the served schedule against the cut bound (below)
    python -m bench.schedules --hetero   # where heterogeneous BFB (LP (14)) is the fastest allgather

For every graph and collective (allgather, allreduce) the schedule set is built (`bfb.schedule_sets`: BFB,
LP (14), BFB without the slow links, greedy, pipelined trees) and at 1 KiB, 1 MiB and 1 GiB the bench prints
the served time, the cut bound (bandwidth term only, `forest.packing.cut_bound_seconds`; for an allreduce the
reduce-scatter's bound on G^T plus the allgather's), BFB's LP (1) schedule priced on the same links, and BFB on
the graph without its slower links (None when the links are uniform or the fast ones do not connect every
node). Links: 25 Gbps and 10 us unless said; "slow" arcs are 5 Gbps (or as listed). Every served schedule is
model-checked by `schedule_sets`; times are measured from the schedules: `time_us` the dependency-driven time
served (DESIGN section 2, `schedule.dependency`), `barrier_time_us` the same schedule's step-synchronous price
(`LinkCosts.time`); BFB's columns are dependency-driven too.

`--targets` also prints the tree packing (`forest.packing`: method, x* / x, height) and splits the served time
along its longest path (`schedule.dependency.critical_path`): the latencies summed on it (one alpha per message)
and its bytes over bandwidths (their excess over the cut bound is pipeline fill and imbalance).

`--targets`: graphs not in the tests (64 nodes with six 5 Gbps arcs, the two-tier torus(8, 8) whose arcs between
its 8-node rows are 5 Gbps, torus(16, 16) and torus(32, 32) with six slow arcs; other arcs 25 Gbps, alpha 10 us),
allgather and reduce-scatter at 1 GiB and 1 MiB. Per row: the served schedule (`bfb.compare`, every scheduler,
verified) with its dependency-driven time (`time_us`, as the runtimes run it) and its step-synchronous price
(`barrier_time_us`), the cut bound (bandwidth term), their ratio, the schedule's build seconds, TACOS's own
time and build seconds, and the schedule today's code would serve (the fastest by the step-synchronous price
among BFB, LP (14), BFB without slow links and pipelined trees) at its dependency-driven time. TACOS's
published ratio to the bound (Won et al., run on the same kind of graphs): 1.0019-1.06.
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
    from services.synthesis.schedule.dependency import dependency_time
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
            out["rows"].append({"collective": c.value, "size": m, "time_us": r.time_s(m) * 1e6,
                                "barrier_time_us": r.barrier_time_s(m) * 1e6,
                                "scheduler": r.scheduler, "steps": r.steps, "cut_bound_us": bound * 1e6,
                                "bfb_us": dependency_time(ref, costs, m) * 1e6,
                                "bfb_fast_links_us": None if fast is None else dependency_time(fast, costs, m) * 1e6,
                                "ranges": len(ss.ranges)})
    return out


def _two_tier(g) -> dict:
    """torus(8, 8) as 8 rows of 8 (node 8 x + y): arcs within a row 25 Gbps, arcs between rows 5 Gbps."""
    return {int(a): 5.0 for a in range(g.arcs) if g.tails[a] // 8 != g.heads[a] // 8}


def target_cases():
    """(label, expression, slow links, reference topology for BFB, schedulers)."""
    every = ("bfb", "bfb-hetero", "greedy", "trees", "bfb-fast")
    return [
        ("64 six slow", "genkautz(4, 64)", lambda g: _slow(g, 6, 3), None, every),
        ("64 six slow", "torus(8, 8)", lambda g: _slow(g, 6, 4), "torus(8, 8)", every),
        ("two-tier", "torus(8, 8)", _two_tier, "torus(8, 8)", every),
        ("256 six slow", "torus(16, 16)", lambda g: _slow(g, 6, 5), "torus(16, 16)", every),
        ("1024 six slow", "torus(32, 32)", lambda g: _slow(g, 6, 6), "torus(32, 32)",
         ("bfb", "greedy", "trees", "bfb-fast")),
    ]


TACOS_PUBLISHED = "1.0019-1.06"


def run_target(label: str, expr: str, slow_fn, reference, schedulers) -> list[dict]:
    from services.synthesis.bfb.compare import build_candidates, choose
    from services.synthesis.forest.packing import cut_bound_seconds, pack_trees
    from services.synthesis.schedule.dependency import critical_path, dependency_time
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.schedule.links import LinkCosts
    from services.synthesis.topology.catalog import build

    g = build(expr)
    bw = np.full(g.arcs, 25 * GBPS)
    for a, gbps in slow_fn(g).items():
        bw[a] = gbps * GBPS
    costs = LinkCosts(g, np.full(g.arcs, 10e-6), bw)
    gt = g.transpose()
    ref = build(reference) if reference else None
    t0 = time.perf_counter()
    pk = pack_trees(g, bw)
    packing = {"method": pk.method, "rate_gap": float(pk.gap), "height": pk.height, "trees": len(pk.trees),
               "seconds": round(time.perf_counter() - t0, 2)}
    rows = []
    for m in (1 << 30, 1 << 20):
        cands = build_candidates(g, costs, m, collectives=(Collective.ALLGATHER, Collective.REDUCESCATTER),
                                 schedulers=schedulers, reference=ref)
        for c, lst in cands.items():
            bound = cut_bound_seconds(g, bw, m) if c is Collective.ALLGATHER else \
                cut_bound_seconds(gt, costs.transposed(gt).bandwidth_Bps, m)
            served = choose(g, c, lst, m)
            dep = {x.scheduler: dependency_time(x.schedule, costs, m) for x in lst if x.schedule is not None}
            bar = {x.scheduler: costs.time(x.schedule, m) for x in lst if x.schedule is not None}
            today = min((k for k in bar if k != "greedy"), key=lambda k: bar[k])
            best = served.chosen.scheduler
            cp = critical_path(served.chosen.schedule, costs, m)
            tacos = next(x for x in lst if x.scheduler == "greedy")
            rows.append({"graph": f"{label} {expr}", "nodes": g.nodes, "collective": c.value, "size": m,
                         "served": best, "time_us": dep[best] * 1e6, "barrier_time_us": bar[best] * 1e6,
                         "cut_bound_us": bound * 1e6, "ratio": dep[best] / bound,
                         "build_s": served.chosen.seconds, "tacos_us": dep.get("greedy", float("nan")) * 1e6,
                         "tacos_ratio": dep.get("greedy", float("nan")) / bound, "tacos_build_s": tacos.seconds,
                         "today": today, "today_us": dep[today] * 1e6, "tacos_published": TACOS_PUBLISHED,
                         "path_latency_us": cp.latency_s * 1e6, "path_bytes_us": cp.per_byte_s * m * 1e6,
                         "packing": packing})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def print_targets(rows: list[dict]) -> None:
    names = {1 << 20: "1MiB", 1 << 30: "1GiB"}
    print("\n| graph | coll | size | served | time_us | barrier_time_us | cut bound us | ratio | build s | "
          "TACOS us | TACOS ratio | TACOS build s | TACOS published | today's served | today us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['graph']} | {r['collective']} | {names[r['size']]} | {r['served']} | {r['time_us']:.1f} | "
              f"{r['barrier_time_us']:.1f} | {r['cut_bound_us']:.1f} | {r['ratio']:.4f} | {r['build_s']:.2f} | "
              f"{r['tacos_us']:.1f} | {r['tacos_ratio']:.4f} | {r['tacos_build_s']:.2f} | {r['tacos_published']} | "
              f"{r['today']} | {r['today_us']:.1f} |")


HETERO_CASES = (("torus(4, 4)", 5), ("genkautz(4, 32)", 6), ("circulant(24, 1, 5)", 7))


def hetero_crossover(expr: str, seed: int) -> dict:
    """LP (14) (`bfb-hetero@1MiB`, `@1GiB`) against every other allgather candidate of a schedule set on random
    per-link costs (alpha uniform in 2-12 us, 100 Gbps with five arcs at 25 Gbps; fixed seed): the sizes where
    a heterogeneous BFB schedule is the fastest (exact ranges of the lower envelope), the set's ranges it
    serves, and its time against the cut bound at 1 GiB."""
    from fractions import Fraction

    from services.synthesis.bfb.schedule_sets import schedule_sets
    from services.synthesis.forest.packing import cut_bound_seconds
    from services.synthesis.schedule.envelope import integer_ranges, lower_envelope
    from services.synthesis.schedule.ir import Collective
    from services.synthesis.schedule.links import LinkCosts
    from services.synthesis.topology.catalog import build

    g = build(expr)
    rng = np.random.default_rng(seed)
    bw = np.full(g.arcs, 100 * GBPS)
    bw[rng.choice(g.arcs, 5, replace=False)] = 25 * GBPS
    costs = LinkCosts(g, rng.uniform(2e-6, 12e-6, g.arcs), bw)
    ag = Collective.ALLGATHER
    full = schedule_sets(g, costs, (ag,), greedy_chunks=(1,))[ag]
    others = schedule_sets(g, costs, (ag,), schedulers=("bfb", "bfb-fast", "greedy", "trees"), greedy_chunks=(1,))[ag]
    hetero = schedule_sets(g, costs, (ag,), schedulers=("bfb-hetero",))[ag]
    served = [(r.min_bytes, r.max_bytes, r.scheduler) for r in full.ranges if r.scheduler.startswith("bfb-hetero")]
    curves = [r.curve for r in hetero.ranges] + [r.curve for r in others.ranges]
    lp14 = [(lo, hi) for lo, hi, k in integer_ranges(lower_envelope(curves)) if k < len(hetero.ranges)]
    gib = 1 << 30
    bound = cut_bound_seconds(g, bw, gib)
    best_h = min(float(r.curve(Fraction(gib))) for r in hetero.ranges)
    return {"expr": expr, "seed": seed, "lp14_fastest_bytes": lp14, "set_serves_lp14": served,
            "lp14_x_cut_bound_1GiB": round(best_h / bound, 3),
            "served_x_cut_bound_1GiB": round(float(full.at(gib).curve(Fraction(gib))) / bound, 3),
            "served_1GiB": full.at(gib).scheduler, "served_1KiB": full.at(1 << 10).scheduler}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--targets", action="store_true", help="TACOS and the served schedule against the cut bound")
    p.add_argument("--only", type=int, nargs="*", help="with --targets: which target graphs (0-based)")
    p.add_argument("--hetero", action="store_true", help="where heterogeneous BFB (LP (14)) is the fastest")
    args = p.parse_args(argv)
    if args.hetero:
        for expr, seed in HETERO_CASES:
            print(json.dumps(hetero_crossover(expr, seed)), flush=True)
        return 0
    if args.targets:
        rows = []
        for i, case in enumerate(target_cases()):
            if args.only is None or i in args.only:
                rows += run_target(*case)
        print_targets(rows)
        return 0
    todo = cases()[:3] if args.quick else cases()
    results = []
    for label, expr, fn in todo:
        res = run_case(label, expr, fn)
        print(json.dumps(res), flush=True)
        results.append(res)
    print(f"\n{'graph':<48} {'coll':<9} {'size':>6} {'time_us':>11} {'barrier':>11} {'scheduler':<22} "
          f"{'cut bound':>11} {'x bound':>7} {'bfb':>11} {'no-slow':>11}")
    names = {1 << 10: "1KiB", 1 << 20: "1MiB", 1 << 30: "1GiB"}
    for res in results:
        for row in res["rows"]:
            fast = row["bfb_fast_links_us"]
            print(f"{res['label'][:5] + ' ' + res['expr']:<48} {row['collective']:<9} {names[row['size']]:>6} "
                  f"{row['time_us']:>11.1f} {row['barrier_time_us']:>11.1f} {row['scheduler']:<22} "
                  f"{row['cut_bound_us']:>11.1f} {row['time_us'] / row['cut_bound_us']:>7.3f} "
                  f"{row['bfb_us']:>11.1f} {'-' if fast is None else f'{fast:11.1f}':>11}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
