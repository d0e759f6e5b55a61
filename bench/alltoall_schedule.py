"""All-to-all schedules that run (time-stepped LP, chunked hop-by-hop paths, model-checked): solve time and
bandwidth cost against the MCF bound at N = 256, d = 4.

    python -m bench.alltoall_schedule            # every case, each in a fresh process
    python -m bench.alltoall_schedule --quick    # the vertex-transitive cases only

Target: vertex-transitive (Cayley) topologies of 256 nodes in seconds, model checking included. "tau / MCF"
is the schedule's measured bandwidth cost over the MCF bound d / (N f) (no schedule can go below 1); the
alpha term (steps x alpha) comes on top of both.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CASES = [  # (expression, vertex-transitive, what it is)
    ("torus(16, 16)", True, "2D torus"),
    ("hypercube(8)", True, "hypercube"),
    ("dcirculant(256, 18, 106, 173, 188)", True, "frontier (256, 4), 9 steps"),
    ("circulant(256, 1, 127)", True, "ShiftedRing"),
    ("line(circulant(16, 1, 4), 2)", False, "frontier (256, 4), 5 steps; |H| = 16"),
    ("debruijn(4, 4)", False, "frontier (256, 4), 4 steps; |H| = 4"),
]
TARGET_VT_S = 10.0


def run_case(expr: str) -> dict:
    from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule
    from services.synthesis.topology.catalog import build

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    s = alltoall_schedule(build(expr))
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out = s.to_dict()
    out["wall_s"] = time.perf_counter() - t0
    out["cpu_s"] = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    print("(timings on a shared machine: CPU time is the figure to compare)")
    print(f"{'topology':<38} {'what':<36} {'steps':>5} {'tau':>8} {'MCF tau':>8} {'tau/MCF':>7} {'Q':>3} "
          f"{'reps':>4} {'LP vars':>8} {'transfers':>9} {'wall s':>7} {'CPU s':>6} {'ok':>3}")
    failed = False
    for expr, vt, what in CASES:
        if args.quick and not vt:
            continue
        res = subprocess.run([sys.executable, "-m", "bench.alltoall_schedule", "--case", expr],
                             capture_output=True, text=True)
        if res.returncode:
            print(f"{expr:<38} failed: {res.stderr.strip().splitlines()[-1]}")
            failed = True
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        ok = r["verified"] and r["bandwidth_over_mcf"] <= 1.10 and (not vt or r["cpu_s"] <= TARGET_VT_S)
        failed |= not ok
        print(f"{expr:<38} {what:<36} {r['steps']:>5} {r['tau']:>8.4f} {r['mcf_tau']:>8.4f} "
              f"{r['bandwidth_over_mcf']:>7.4f} {r['chunks_per_block']:>3} {r['representatives']:>4} "
              f"{r['lp_variables']:>8} {r['transfers']:>9} {r['wall_s']:>7.2f} {r['cpu_s']:>6.2f} "
              f"{'yes' if ok else 'NO':>3}")
    print(f"\ntarget: vertex-transitive N = 256 in under {TARGET_VT_S:.0f} s CPU, tau within 10 % of the MCF bound")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
