"""The frontier against an independent enumeration on (N, d) with N <= 400 and d <= 8, and the frontier's
time (paper section 5.4; target: no dominated entry, frontier time within 2x of the finder before the exact
circulant search).

    python -m bench.frontier_exact                      # time, then the dominated-entry count on every pair
    python -m bench.frontier_exact --time-only          # the frontier sweep's time alone
    PYTHONPATH=/path/to/other/checkout python bench/frontier_exact.py --time-only   # another finder
    python -m bench.frontier_exact --check-only --nodes 101-400/3 --degrees 5-6 --resume FILE
                                                        # some pairs; FILE holds one JSON line per pair done
    python -m bench.frontier_exact --check-only --dcirculant-only --sample 200000 --nodes 101-400 --degrees 6-8
                                                        # directed circulants alone, a larger sample
    python -m bench.frontier_exact --dcirculant-proof   # where directed circulants are ruled out, and how

The enumeration is this script's own: every family expression with N nodes and degree d (as
tests/synthesis/search/test_frontier_exact.py lists them) and one expansion level of family members (line
digraphs, degree expansions, Cartesian powers, products of two). Circulants and directed circulants are listed
per orbit under the units of Z_N when there are at most ORBIT_LIMIT offset sets, otherwise by a fixed-seed
sample of SAMPLE sets containing 1 (so the count is a lower bound where the space is sampled). A candidate is
built (`construct`, the path of `fabricplan schedule`) and measured by the model checker only when its lower
bound (diameter, or the diameters' sum / D + 1 for an expansion, in steps; (N-1)/N in tau) could dominate an
entry.

`--dcirculant-only` checks the frontier against directed circulants alone: a fixed-seed sample of SAMPLE sets
{1, a_2, ..., a_d} (every directed circulant with a unit offset is isomorphic to one containing 1), not reduced
by units (a set drawn twice is measured once), their diameters by the compiled bitset search, so that a sample
of hundreds of thousands costs about a second per pair.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from fractions import Fraction
from functools import lru_cache

import numpy as np

ORBIT_LIMIT = 3_000
SAMPLE = 1_500
MAX_NODES, MAX_DEGREE = 400, 8


def _time_sweep(max_nodes: int, max_degree: int) -> list[tuple[int, float, float]]:
    from services.synthesis.search.finder import frontier

    rows = []
    for d in range(1, max_degree + 1):
        w, c = time.perf_counter(), time.process_time()
        for n in range(2, max_nodes + 1):
            frontier(n, d)
        rows.append((d, time.perf_counter() - w, time.process_time() - c))
    return rows


# ----- the independent enumeration -------------------------------------------------------------------
def _gens(n: int, offs: tuple[int, ...], directed: bool) -> tuple[int, ...]:
    if directed:
        return offs
    return tuple(g for a in offs for g in ((a,) if 2 * a == n else (a, n - a)))


def _offset_sets(n: int, d: int, directed: bool):
    """Offset sets of degree d: every set (per orbit under units) when there are few, else a sample."""
    top = n - 1 if directed else n // 2
    ks = [d] if directed else [k for k in range(1, top + 1) if 2 * k - 1 <= d <= 2 * k]
    for k in ks:
        if k > top:
            continue
        if math.comb(top, k) <= ORBIT_LIMIT:
            yield from itertools.combinations(range(1, top + 1), k)
        else:
            rng = np.random.default_rng([n, d, directed, 17])
            for _ in range(SAMPLE):
                rest = rng.choice(np.arange(2, top + 1), size=k - 1, replace=False)
                yield tuple(sorted([1, *rest.tolist()]))


@lru_cache(maxsize=None)
def circulant_members(n: int, d: int) -> tuple[tuple[str, int], ...]:
    """(expression, diameter) of the circulants with n nodes and degree d this script lists."""
    from services.synthesis.bfb.kernels import circulant_eccentricities

    out, seen = [], set()
    units = [u for u in range(1, n) if math.gcd(u, n) == 1] or [1]
    for directed in (False, True):
        rows = []
        for offs in _offset_sets(n, d, directed):
            gens = _gens(n, offs, directed)
            if len(gens) != d or len(set(offs)) != len(offs) or math.gcd(n, *offs) != 1:
                continue
            key = min(tuple(sorted(u * g % n for g in gens)) for u in units)
            if key in seen:
                continue
            seen.add(key)
            rows.append((offs, gens))
        if not rows:
            continue
        diam = circulant_eccentricities(n, np.array([g for _, g in rows], dtype=np.int64))
        name = "dcirculant" if directed else "circulant"
        out += [(f"{name}({n}, {', '.join(map(str, o))})", int(dm)) for (o, _), dm in zip(rows, diam) if dm < n]
    return tuple(out)


@lru_cache(maxsize=None)
def members(n: int, d: int) -> tuple[tuple[str, int], ...]:
    """(expression, diameter) of every family member with n nodes and degree d."""
    from services.synthesis.topology.catalog import build
    from services.synthesis.topology.distreg import CATALOGUE
    from services.synthesis.topology.families import torus_factorisations

    exprs = [f"ring({n}, {d})", f"biring({n}, {d})", f"complete({n})", f"bipartite({n // 2})"]
    exprs += [f"torus({', '.join(map(str, dims))})" for dims in torus_factorisations(n)]
    exprs += [f"twisted_torus({a}, {n // a}, {s})" for a in range(2, n + 1) if n % a == 0 and n // a >= 2
              for s in range(a)] if d in (3, 4) else []
    exprs += [f"hamming({k}, {q})" for k in range(1, 10) for q in range(2, n + 1) if q ** k == n]
    exprs += [f"genkautz({d}, {n})"] if d >= 2 else []
    exprs += [f"kautz({d}, {k})" for k in range(10) if d >= 2 and d ** k * (d + 1) == n]
    exprs += [f"debruijn({d}, {k})" for k in range(1, 10) if d >= 2 and d ** k == n]
    exprs += [f"distreg({name})" for name, e in CATALOGUE.items() if (e.nodes, e.degree) == (n, d)]
    out = []
    for e in exprs:
        try:
            g = build(e)
        except ValueError:
            continue
        if (g.nodes, g.degree) == (n, d):
            out.append((e, g.diameter))
    return tuple(out) + circulant_members(n, d)


def candidates(n: int, d: int):
    """(expression, lower bound on its steps): members, then one expansion level of members."""
    yield from members(n, d)
    if d >= 2 and n % d == 0 and n // d >= 2:
        yield from ((f"line({g})", dm + 1) for g, dm in members(n // d, d))
    for m in range(2, d + 1):
        if d % m == 0 and n % m == 0 and n // m >= 2:
            yield from ((f"degree({g}, {m})", dm) for g, dm in members(n // m, d // m))
    for p in range(2, d + 1):
        q = round(n ** (1 / p))
        if d % p == 0 and q >= 2 and q ** p == n:
            yield from ((f"power({g}, {p})", p * dm) for g, dm in members(q, d // p))
    for n1 in range(2, math.isqrt(n) + 1):
        if n % n1 == 0:
            for d1 in range(1, d):
                for x, dx in members(n1, d1):
                    for y, dy in members(n // n1, d - d1):
                        if x != y:
                            yield f"product({x}, {y})", dx + dy


def dcirculant_candidates(n: int, d: int):
    """(expression, diameter) of a fixed-seed sample of SAMPLE directed circulants {1, a_2, ..., a_d} of Z_n."""
    from services.synthesis.bfb.kernels import circulant_eccentricities

    if d < 2 or d > n - 1:
        return
    rng = np.random.default_rng([n, d, 23])
    rest = np.concatenate([np.argsort(rng.random((min(4_096, SAMPLE - i), n - 2)), axis=1)[:, :d - 1] + 2
                           for i in range(0, SAMPLE, 4_096)])
    rows = np.concatenate([np.ones((SAMPLE, 1), dtype=np.int64), np.sort(rest, axis=1).astype(np.int64)], axis=1)
    rows = np.unique(rows, axis=0)
    diam = circulant_eccentricities(n, rows)
    for i in np.argsort(diam, kind="stable").tolist():
        if diam[i] < n:
            yield f"dcirculant({n}, {', '.join(map(str, rows[i].tolist()))})", int(diam[i])


def _measured(expr: str) -> tuple[int, Fraction] | None:
    from services.synthesis.schedule.verify import verify
    from services.synthesis.search.construct import construct

    try:
        built = construct(expr)
    except ValueError:                               # e.g. degree expansion of a graph with self-loops
        return None
    report = verify(built.schedule, built.topology)
    if not report.ok:
        raise AssertionError(f"{expr}: the model checker refused its schedule: {report.violation}")
    return report.steps, report.tau


def dominated(n: int, d: int, listed=candidates) -> tuple[list[tuple[str, str]], int]:
    """(entry, dominating candidate) pairs at (n, d) among `listed(n, d)`, and how many were built."""
    from services.synthesis.search.finder import frontier

    entries = [(c.expr, c.steps, c.tau) for c in frontier(n, d)]
    star = Fraction(n - 1, n)
    out, built = [], 0
    for expr, lo in listed(n, d):
        if not any(lo <= s and (lo < s or star < t) for _, s, t in entries):
            continue
        cost = _measured(expr)
        built += 1
        if cost is None:
            continue
        out += [(e, expr) for e, s, t in entries if cost[0] <= s and cost[1] <= t and cost != (s, t)]
    return out, built


def dcirculant_proof(max_nodes: int, max_degree: int) -> dict[str, int]:
    """Per (N, d), 2 <= d: why no directed circulant of d offsets dominates a frontier entry. "bound": every
    entry has fewer steps than the abelian Moore floor of d directed offsets (or is that floor at (N-1)/N);
    "row proven": the tabulated Pareto row is proven (`ParetoOffsets.proven`); "searched": neither."""
    from services.synthesis.search.circulant_pareto import pareto_lookup
    from services.synthesis.search.circulants import diameter_floor
    from services.synthesis.search.finder import frontier

    out = {"bound": 0, "row proven": 0, "searched": 0, "no row": 0}
    for d in range(2, max_degree + 1):
        for n in range(d + 2, max_nodes + 1):
            floor, star = diameter_floor(n, d, "dcirculant"), Fraction(n - 1, n)
            if not any(c.steps >= floor and (c.steps, c.tau) != (floor, star) for c in frontier(n, d)):
                out["bound"] += 1
            elif (row := pareto_lookup(n, d)) is None:
                out["no row"] += 1
            else:
                out["row proven" if row.proven else "searched"] += 1
    return out


def _numbers(spec: str) -> list[int]:
    """"2-100", "101-400/7" (every 7th), "84,90" or a mix: the listed integers, in order."""
    out: list[int] = []
    for part in spec.split(","):
        rng, _, step = part.partition("/")
        lo, _, hi = rng.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1, int(step or 1)))
    return out


def _check(pairs: list[tuple[int, int]], resume: str | None, listed=candidates) -> None:
    """The dominated-entry check on (N, d) pairs; with `resume`, one JSON line per pair appended to that
    file, and pairs already in it are not checked again (their results are counted)."""
    done: dict[tuple[int, int], dict] = {}
    if resume:
        try:
            with open(resume) as fh:
                for line in fh:
                    r = json.loads(line)
                    done[(r["n"], r["d"])] = r
        except FileNotFoundError:
            pass
    t0 = time.perf_counter()
    out = open(resume, "a") if resume else None
    results = []
    for n, d in pairs:
        if (n, d) in done:
            results.append(done[(n, d)])
            continue
        t1 = time.perf_counter()
        bad, built = dominated(n, d, listed)
        r = {"n": n, "d": d, "dominated": sorted({e for e, _ in bad}), "by": [b for _, b in bad][:3],
             "built": built, "seconds": round(time.perf_counter() - t1, 2)}
        results.append(r)
        if out:
            out.write(json.dumps(r) + "\n")
            out.flush()
        if bad:
            print(f"  ({n}, {d}): {bad[0][0]} dominated by {bad[0][1]}", flush=True)
    bad_pairs = [r for r in results if r["dominated"]]
    total_bad = sum(len(r["dominated"]) for r in results)
    print(f"\ndominated frontier entries over {len(results)} (N, d) pairs: {total_bad} (target 0) in "
          f"{len(bad_pairs)} pairs; {sum(r['built'] for r in results)} candidates built and model-checked; "
          f"{time.perf_counter() - t0:.0f} s this run")
    sys.exit(0 if total_bad == 0 else 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-nodes", type=int, default=MAX_NODES)
    ap.add_argument("--max-degree", type=int, default=MAX_DEGREE)
    ap.add_argument("--nodes", help='the N to check, e.g. "2-100,101-400/7" (default 2..--max-nodes)')
    ap.add_argument("--degrees", help='the d to check, e.g. "5-8" (default 1..--max-degree)')
    ap.add_argument("--resume", help="JSON-lines file of checked pairs: appended to, and skipped when present")
    ap.add_argument("--time-only", action="store_true")
    ap.add_argument("--check-only", action="store_true", help="skip the frontier sweep's timing")
    ap.add_argument("--sample", type=int, default=SAMPLE,
                    help=f"offset sets sampled per circulant kind beyond {ORBIT_LIMIT} (default {SAMPLE})")
    ap.add_argument("--dcirculant-only", action="store_true",
                    help="check against a sample of --sample directed circulants alone (no other family)")
    ap.add_argument("--dcirculant-proof", action="store_true",
                    help="count the (N, d) where directed circulants are ruled out, by bound or proven table row")
    args = ap.parse_args()
    globals()["SAMPLE"] = args.sample          # read by _offset_sets
    if args.dcirculant_proof:
        print(dcirculant_proof(args.max_nodes, args.max_degree))
        return
    from services.synthesis.bfb.warm import warm

    warm()
    if not args.check_only:
        rows = _time_sweep(args.max_nodes, args.max_degree)
        print(f"frontier(N, d) for N = 2..{args.max_nodes}, each d, one process, cold in-memory caches")
        print(f"{'d':>3} {'wall s':>8} {'CPU s':>8}")
        for d, w, c in rows:
            print(f"{d:>3} {w:>8.2f} {c:>8.2f}")
        print(f"all {sum(r[1] for r in rows):>8.2f} {sum(r[2] for r in rows):>8.2f}")
    if args.time_only:
        return
    nodes = _numbers(args.nodes) if args.nodes else list(range(2, args.max_nodes + 1))
    degrees = _numbers(args.degrees) if args.degrees else list(range(1, args.max_degree + 1))
    _check([(n, d) for d in degrees for n in nodes], args.resume,
           dcirculant_candidates if args.dcirculant_only else candidates)


if __name__ == "__main__":
    main()
