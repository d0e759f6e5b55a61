"""BFB schedule generation benchmark (paper Table 6): build and model-check full allgather schedules.

    python -m bench.bfb            # the three issue targets plus Table 6's small instances
    python -m bench.bfb --quick    # only the three targets

Each case runs in a fresh process so peak memory (max RSS of the process and its pool workers) is per case.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

# (expression, paper's BFB seconds from Table 6 or None, build target s, build+verify target s)
TARGETS = [
    ("hypercube(10)", 52.7, 5.0, 15.0),
    ("torus(50, 50)", 61.1, 5.0, 15.0),
    ("genkautz(4, 1024)", None, 30.0, None),
]
TABLE_6_SMALL = [
    ("hypercube(2)", "<0.01"), ("hypercube(3)", "<0.01"), ("hypercube(4)", "<0.01"), ("hypercube(5)", "0.03"),
    ("hypercube(6)", "0.17"), ("torus(2, 2)", "<0.01"), ("torus(3, 3)", "<0.01"), ("torus(4, 4)", "<0.01"),
    ("torus(5, 5)", "0.01"), ("torus(6, 6)", "0.03"),
]
PEAK_LIMIT_GIB = 4.0


INFO_FULL_SOLVE = ["hypercube(10)", "torus(50, 50)"]   # every node solved, no translation shortcut


def run_case(expr: str, shortcut: bool = True) -> dict:
    from services.synthesis.bfb.lp import bfb_allgather
    from services.synthesis.topology.catalog import build
    from services.synthesis.bfb.warm import warm
    from services.synthesis.schedule.verify import verify

    warm()                    # load the compiled kernels once per process, outside the timed build
    t0 = time.perf_counter()
    topo = build(expr)
    result = bfb_allgather(topo, shortcut=shortcut)
    built = time.perf_counter() - t0
    report = verify(result.schedule, topo)
    total = time.perf_counter() - t0
    peak_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return {"expr": expr, "nodes": topo.nodes, "steps": report.steps, "tau": str(report.tau),
            "verified": report.ok, "prediction_matches": report.tau == result.tau,
            "transfers": result.schedule.transfers, "build_s": built, "total_s": total,
            "peak_gib": peak_kib / 2**20, "shortcut": result.used_shortcut}


def in_subprocess(expr: str, shortcut: bool = True) -> dict:
    flag = [] if shortcut else ["--no-shortcut"]
    out = subprocess.run([sys.executable, "-m", "bench.bfb", "--case", expr, *flag], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-shortcut", action="store_true")
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, shortcut=not args.no_shortcut)))
        return
    print(f"{'topology':<20} {'N':>5} {'steps':>5} {'tau':>10} {'transfers':>10} {'build s':>8} {'+verify s':>9} "
          f"{'peak GiB':>8} {'paper s':>8} {'target':>14} {'ok':>4}")
    failed = False
    for expr, paper, t_build, t_total in TARGETS:
        r = in_subprocess(expr)
        ok = (r["verified"] and r["prediction_matches"] and r["build_s"] <= t_build
              and (t_total is None or r["total_s"] <= t_total) and r["peak_gib"] < PEAK_LIMIT_GIB)
        failed |= not ok
        target = f"{t_build:g}/{t_total:g}" if t_total else f"{t_build:g}/-"
        print(f"{expr:<20} {r['nodes']:>5} {r['steps']:>5} {r['tau']:>10} {r['transfers']:>10} {r['build_s']:>8.2f} "
              f"{r['total_s']:>9.2f} {r['peak_gib']:>8.2f} {paper if paper else '-':>8} {target:>14} "
              f"{'yes' if ok else 'NO':>4}")
    if not args.quick:
        print("\nThe same, solving every node (no translation shortcut; information, no target):")
        for expr in INFO_FULL_SOLVE:
            r = in_subprocess(expr, shortcut=False)
            print(f"{expr:<20} {r['nodes']:>5} {r['steps']:>5} {r['tau']:>10} {r['transfers']:>10} "
                  f"{r['build_s']:>8.2f} {r['total_s']:>9.2f} {r['peak_gib']:>8.2f}")
        print("\nTable 6 small instances (paper's BFB column):")
        for expr, paper in TABLE_6_SMALL:
            r = in_subprocess(expr)
            print(f"{expr:<20} {r['nodes']:>5} {r['steps']:>5} {r['tau']:>10} {r['transfers']:>10} "
                  f"{r['build_s']:>8.3f} {r['total_s']:>9.3f} {r['peak_gib']:>8.2f} {paper:>8}")
    print("\ntargets: build <= 5 s and build+verify <= 15 s (hypercube(10), torus(50, 50)); genkautz(4, 1024) "
          f"build <= 30 s; peak < {PEAK_LIMIT_GIB:g} GiB. Paper hardware not stated; this machine: 2 cores.")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
