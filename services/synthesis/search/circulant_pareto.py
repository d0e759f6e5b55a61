"""Directed circulants on the (steps, tau) plane (paper App. F.4, Theorem 15, Eq. (2); section 5.4's "database
of known base topologies").

BFB on a directed circulant takes D(G) steps (Theorem 15), but unlike the undirected circulants it is not
always BW-optimal, and two offset sets of the same diameter can differ in tau: at (51, 6) the smallest
diameter is 3 and the sets meeting it range from tau = 50/51 upwards, while the generalized Kautz graph of 3
steps has tau 20/17. So the smallest diameter alone (`circulants.best_offsets`) is not what the frontier needs:
it needs, per diameter, the smallest tau, i.e. the Pareto set of (D(G), tau) over offset sets.

`pareto_offsets` computes it. Every canonical offset set (`circulants.canonical`: one per orbit under the
units of Z_n, at least) has its diameter evaluated when there are at most EVALUATE_BUDGET of them, otherwise
a deterministic sample of SAMPLE_ROWS sets containing 1 (and the structured seeds); then, by increasing
diameter, up to PRICE_CAP sets of each diameter are priced by BFB on Z_n (`bfb.price.cyclic_step_maxima`:
node 0's problems are every node's), stopping at the first diameter where a BW-optimal set, tau = (n-1)/n,
is found (it dominates every larger diameter). Whatever is kept is exact ((D, tau) of that set); what is
proven about the whole kind is `ParetoOffsets.proven`:

- the first entry is (floor, (n-1)/n), the abelian Moore bound (`circulants.diameter_floor`) met by a
  BW-optimal set: no directed circulant of the kind has fewer steps or a smaller tau; or
- the search was exhaustive and every set at the entries' diameters was priced (no cap reached).

The rows are computed offline (`python -m services.synthesis.search.circulant_pareto`, resumable) for
k = 2..8 offsets up to 400 nodes, and read by the finder (`bases`); `tests/synthesis/search/
test_circulant_pareto.py` re-prices rows and re-runs the search on small ones.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np

from services.synthesis.bfb.kernels import circulant_eccentricities
from services.synthesis.bfb.price import cyclic_step_maxima
from services.synthesis.search.offset_climb import climb
from services.synthesis.search.circulants import (_BATCH_ROWS, _batches, _canonical_chunks, _connected,
                                                  _random_rows, _seeds, KINDS, canonical_count,
                                                  diameter_floor, domain, generators)

__all__ = ["EVALUATE_BUDGET", "SAMPLE_ROWS", "CLIMB_EVALS", "CLIMB_PATIENCE", "PRICE_CAP", "KEEP_MIN_DIAMETER", "PARETO_TABLE", "PARETO_KS",
           "ParetoOffsets", "bfb_tau", "pareto_offsets", "pareto_lookup", "pareto_rows",
           "LINE_TABLE", "LINE_CAP", "line_base", "line_lookup", "line_rows"]

EVALUATE_BUDGET = 1_500_000   # every canonical offset set has its diameter evaluated when there are at most this many
SAMPLE_ROWS = 100_000         # else a fixed-seed sample of this many sets containing 1 ...
CLIMB_EVALS = 600_000         # ... and local search (`offset_climb`) spending this many breadth-first searches ...
CLIMB_PATIENCE = 1_000        # ... in climbs that end after this many moves in a row without a better score
PRICE_CAP = 600               # sets priced by BFB per diameter
KEEP_MIN_DIAMETER = 4         # smallest-diameter sets kept beside the Pareto entries (line-digraph bases)
PARETO_TABLE = Path(__file__).with_name("dcirculant_pareto.jsonl")
PARETO_KS = tuple(("dcirculant", k, 400) for k in (5, 6, 7, 8, 4, 3, 2))     # build order: the costly first


@dataclass(frozen=True)
class ParetoOffsets:
    """The (diameter, tau) Pareto set found over offset sets of (n, k, kind), and what is proven about it."""

    nodes: int
    entries: tuple[tuple[int, Fraction, tuple[int, ...]], ...]   # (D(G) = BFB steps, BFB tau, offsets)
    smallest: tuple[tuple[int, tuple[int, ...]], ...]            # up to KEEP_MIN_DIAMETER sets of the least D
    floor: int                    # no set of the kind has a smaller diameter (abelian Moore bound)
    exhaustive: bool              # every canonical set's diameter was evaluated
    complete: bool                # every set of each entry's diameter (and below) was priced
    evaluated: int                # offset sets whose diameter was evaluated
    climbed: int = 0              # breadth-first searches spent by local search (0: none ran)

    @property
    def proven(self) -> bool:
        """No offset set of the kind dominates an entry (see the module docstring)."""
        if not self.entries:
            return self.exhaustive
        d, tau, _ = self.entries[0]
        return (d == self.floor and tau == Fraction(self.nodes - 1, self.nodes)) or (self.exhaustive and self.complete)

    @property
    def how(self) -> str:
        """"proven" (see `proven`) or "searched" (the sample and, where `climbed`, local search found these)."""
        return "proven" if self.proven else "searched"


def bfb_tau(n: int, gens) -> tuple[int, Fraction]:
    """(steps, tau) of the optimal BFB schedule on the Cayley graph of Z_n with these generators: Eq. (2),
    tau = (d / n) sum_t U*_t, node 0's per-step maxima being every node's (Theorem 15 for the steps)."""
    steps, maxima = cyclic_step_maxima(n, [int(g) for g in gens])
    return steps, Fraction(len(gens)) * sum(maxima, Fraction(0)) / n


def _rows(n: int, k: int, kind: str, budget: int, sample: int):
    """(batches of offset rows, exhaustive?): every canonical set when there are at most `budget`, else the
    seeds and a fixed-seed sample of `sample` sets containing 1."""
    if canonical_count(n, k, kind) <= budget:
        return _batches(_canonical_chunks(n, k, kind), _BATCH_ROWS), True
    rng = np.random.default_rng([n, k, KINDS.index(kind), 29])
    seeds = np.array(_seeds(n, k, kind), dtype=np.int64).reshape(-1, k)
    rows = np.concatenate([seeds, _random_rows(rng, domain(n, kind), k, sample)])
    return (rows[i:i + _BATCH_ROWS] for i in range(0, len(rows), _BATCH_ROWS)), False


def pareto_offsets(n: int, k: int, kind: str = "dcirculant", budget: int = EVALUATE_BUDGET,
                   sample: int = SAMPLE_ROWS, price_cap: int = PRICE_CAP, climb_evals: int = CLIMB_EVALS,
                   patience: int = CLIMB_PATIENCE) -> ParetoOffsets:
    """The Pareto set of (D(G), BFB tau) over offset sets of k offsets of the kind on n nodes (module
    docstring). Cost: at most `budget` diameter evaluations (one bitset breadth-first search each, about
    1 us at 400 nodes; beyond, `sample` and `climb_evals` for local search of directed circulants) and
    `price_cap` BFB pricings per diameter (about 0.2 ms each)."""
    floor = diameter_floor(n, k, kind)
    if (kind == "half" and n % 2) or k < 1 or k > domain(n, kind):
        return ParetoOffsets(n, entries=(), smallest=(), floor=floor, exhaustive=True, complete=True, evaluated=0)
    batches, exhaustive = _rows(n, k, kind, budget, sample)
    tau_star = Fraction(n - 1, n)
    levels: dict[int, list[tuple[int, ...]]] = {}
    counts: dict[int, int] = {}
    evaluated = 0
    for rows in batches:
        rows = rows[(np.diff(rows, axis=1) != 0).all(axis=1) & _connected(n, rows, kind)]
        if not len(rows):
            continue
        evaluated += len(rows)
        diam = circulant_eccentricities(n, generators(n, rows, kind), 0)
        for dm in np.unique(diam[diam < n]).tolist():
            counts[dm] = counts.get(dm, 0) + int((diam == dm).sum())
            keep = levels.setdefault(dm, [])
            if len(keep) < price_cap:
                keep += [tuple(int(x) for x in r) for r in rows[diam == dm][:price_cap - len(keep)]]
        if floor in levels and _meets(n, kind, levels[floor], tau_star):
            exhaustive = False                # stopped: a BW-optimal set at the floor dominates every other
            break
    climbed = 0
    if not exhaustive and kind == "dcirculant" and climb_evals > 0 and k >= 2 and not (
            floor in levels and _meets(n, kind, levels[floor], tau_star)):
        found = climb(n, k, seed=n * 64 + k, budget=climb_evals, patience=patience)
        climbed = found.evaluated
        for dm in np.unique(found.diameters).tolist():
            fresh = sorted({tuple(int(x) for x in r) for r in found.rows[found.diameters == dm]})
            counts[dm] = counts.get(dm, 0) + len(fresh)
            old = levels.get(dm, [])
            levels[dm] = (fresh + [o for o in old if o not in set(fresh)])[:price_cap]   # the climb's sets first
    entries: list[tuple[int, Fraction, tuple[int, ...]]] = []
    complete = True
    for dm in sorted(levels):
        best = None
        for offs in sorted(set(levels[dm])):
            steps, tau = _bfb_tau_of(n, kind, offs)
            assert steps == dm, (n, offs, steps, dm)
            if best is None or tau < best[0]:
                best = (tau, offs)
            if tau == tau_star:
                break
        complete = complete and (counts[dm] <= price_cap or best[0] == tau_star)
        if not entries or best[0] < entries[-1][1]:
            entries.append((dm, best[0], best[1]))
        if best[0] == tau_star:
            break
    smallest = ()
    if levels:
        low = min(levels)
        smallest = tuple((low, offs) for offs in sorted(set(levels[low]))[:KEEP_MIN_DIAMETER])
    return ParetoOffsets(n, entries=tuple(entries), smallest=smallest, floor=floor, exhaustive=exhaustive,
                         complete=complete, evaluated=evaluated, climbed=climbed)


def _meets(n: int, kind: str, rows: list[tuple[int, ...]], tau_star: Fraction) -> bool:
    """Whether one of these offset sets is BW-optimal."""
    return any(_bfb_tau_of(n, kind, offs)[1] == tau_star for offs in rows)


@lru_cache(maxsize=1 << 16)
def _bfb_tau_of(n: int, kind: str, offs: tuple[int, ...]) -> tuple[int, Fraction]:
    return bfb_tau(n, generators(n, np.array([offs], dtype=np.int64), kind)[0])


# ----- the offline table ---------------------------------------------------------------------------
def _row(kind: str, k: int, n: int, p: ParetoOffsets, seconds: float) -> dict:
    """One table line; "how" is "proven" or "searched", and a searched row by local search names its budget
    ("climb": [breadth-first searches spent, patience])."""
    row = {"kind": kind, "k": k, "n": n, "floor": p.floor, "how": p.how, "exhaustive": p.exhaustive,
           "complete": p.complete, "evaluated": p.evaluated,
           "entries": [[d, str(t), list(o)] for d, t, o in p.entries],
           "smallest": [[d, list(o)] for d, o in p.smallest], "seconds": round(seconds, 3)}
    if p.climbed:
        row["climb"] = [p.climbed, CLIMB_PATIENCE]
    return row


def _merged(new: ParetoOffsets, old: ParetoOffsets | None) -> ParetoOffsets:
    """The Pareto set of both searches' entries (each entry is the exact (D, tau) of its offsets, so the union
    is as exact as either) and the smallest-diameter sets of both; the flags and counts are the new search's."""
    if old is None:
        return new
    out: list[tuple[int, Fraction, tuple[int, ...]]] = []
    for d, t, o in sorted(set(new.entries) | set(old.entries)):
        if not out or t < out[-1][1]:
            out.append((d, t, o))
    both = sorted(set(new.smallest) | set(old.smallest))
    low = both[0][0] if both else 0
    smallest = tuple(x for x in both if x[0] == low)[:KEEP_MIN_DIAMETER]
    return ParetoOffsets(new.nodes, entries=tuple(out), smallest=smallest, floor=new.floor,
                         exhaustive=new.exhaustive, complete=new.complete, evaluated=new.evaluated,
                         climbed=new.climbed)


def pareto_rows() -> list[dict]:
    """Every row of the table file."""
    if not PARETO_TABLE.exists():
        return []
    return [json.loads(line) for line in PARETO_TABLE.read_text().splitlines() if line.strip()]


@lru_cache(maxsize=1)
def _index() -> dict[tuple[str, int, int], ParetoOffsets]:
    out = {}
    for r in pareto_rows():
        out[(r["kind"], r["k"], r["n"])] = ParetoOffsets(
            r["n"], entries=tuple((d, Fraction(t), tuple(o)) for d, t, o in r["entries"]),
            smallest=tuple((d, tuple(o)) for d, o in r["smallest"]), floor=r["floor"],
            exhaustive=r["exhaustive"], complete=r["complete"], evaluated=r["evaluated"],
            climbed=r.get("climb", [0])[0])
    return out


def pareto_lookup(n: int, k: int, kind: str = "dcirculant") -> ParetoOffsets | None:
    """The tabulated search for (n, k, kind), or None when the table does not hold it."""
    return _index().get((kind, k, n))


# ----- line digraphs of directed circulants --------------------------------------------------------
LINE_TABLE = Path(__file__).with_name("dcirculant_line.jsonl")
LINE_MAX_NODES = 400          # line digraphs L(G) of up to this many nodes (n k <= 400)
LINE_CAP = 256                # bases of the least diameter whose line digraph is priced, per (n, k)


def line_base(n: int, k: int, kind: str = "dcirculant", budget: int = EVALUATE_BUDGET, sample: int = SAMPLE_ROWS,
              cap: int = LINE_CAP, levels: int = 1) -> list[tuple[int, Fraction, tuple[int, ...], int, int]]:
    """Bases G among the offset sets of the `levels` smallest diameters of (n, k) whose line digraphs L(G)
    have the least BFB tau (D(L(G)) = D(G) + 1 steps, Definition 12): BFB on L(G) depends on G beyond its
    (steps, tau), e.g. of the 2,202 BW-optimal directed circulants of (18, 5) of diameter 3, 160 have a
    BW-optimal line digraph and the rest tau = 1. Per diameter up to `cap` sets are priced (BW-optimal bases
    first), stopping at a BW-optimal L(G), which ends the search (larger diameters cannot do better).
    Returns the Pareto entries (D(G), tau of L(G), offsets, sets priced, sets of that diameter)."""
    from services.synthesis.search.pricing import price

    batches, _ = _rows(n, k, kind, budget, sample)
    pools: dict[int, list[tuple[int, ...]]] = {}
    counts: dict[int, int] = {}
    for rows in batches:
        rows = rows[(np.diff(rows, axis=1) != 0).all(axis=1) & _connected(n, rows, kind)]
        if not len(rows):
            continue
        diam = circulant_eccentricities(n, generators(n, rows, kind), 0)
        for dm in np.unique(diam[diam < n]).tolist():
            counts[dm] = counts.get(dm, 0) + int((diam == dm).sum())
            pools.setdefault(dm, []).extend(tuple(int(x) for x in r) for r in rows[diam == dm][:cap])
    star = Fraction(n * k - 1, n * k)
    out: list[tuple[int, Fraction, tuple[int, ...], int, int]] = []
    for dm in sorted(pools)[:levels]:
        pool = sorted(set(pools[dm]), key=lambda o: (_bfb_tau_of(n, kind, o)[1], o))[:cap]
        best, tried = None, 0
        for offs in pool:
            p = price(f"line({kind}({n}, {', '.join(map(str, offs))}))")
            tried += 1
            if best is None or p.tau < best[0]:
                best = (p.tau, offs)
            if p.tau == star:
                break
        if best is not None and (not out or best[0] < out[-1][1]):
            out.append((dm, best[0], best[1], tried, counts[dm]))
        if out and out[-1][1] == star:
            break
    return out


def line_rows() -> list[dict]:
    if not LINE_TABLE.exists():
        return []
    return [json.loads(line) for line in LINE_TABLE.read_text().splitlines() if line.strip()]


@lru_cache(maxsize=1)
def _line_index() -> dict[tuple[str, int, int], tuple[tuple[int, Fraction, tuple[int, ...]], ...]]:
    out = {}
    for r in line_rows():                          # a later row for the same (n, k) replaces an earlier one
        first = (r["diameter"], Fraction(r["tau"]), tuple(r["offsets"]))
        out[(r["kind"], r["k"], r["n"])] = (first,) + tuple((d, Fraction(t), tuple(o)) for d, t, o in r.get("next", []))
    return out


def line_lookup(n: int, k: int, kind: str = "dcirculant") -> tuple[tuple[int, Fraction, tuple[int, ...]], ...]:
    """(D(G), BFB tau of L(G), G's offsets) of the tabulated line-digraph bases of (n, k): the least diameter's
    best and, where its line digraph is not BW-optimal, the next diameter's when better; () when untabulated."""
    return _line_index().get((kind, k, n), ())


def _build_lines(ks, levels: int = 1) -> None:
    """Append a row per (n, k) not in the table; with levels = 2, re-do the rows whose line digraph is not
    BW-optimal over the two smallest diameters (the new row replaces the old one)."""
    rows = line_rows()
    done = {(r["kind"], r["k"], r["n"]) for r in rows}
    redo = {(r["kind"], r["k"], r["n"]) for r in rows
            if Fraction(r["tau"]) != Fraction(r["n"] * r["k"] - 1, r["n"] * r["k"])} if levels > 1 else set()
    with LINE_TABLE.open("a") as fh:
        for k in ks:
            for n in range(k + 2, LINE_MAX_NODES // k + 1):
                key = ("dcirculant", k, n)
                if key in done and key not in redo:
                    continue
                t0 = time.perf_counter()
                found = line_base(n, k, levels=levels)
                if not found:
                    continue
                (d, tau, offs, priced, of), rest = found[0], found[1:]
                fh.write(json.dumps({"kind": "dcirculant", "k": k, "n": n, "diameter": d, "tau": str(tau),
                                     "offsets": list(offs), "priced": priced, "of": of,
                                     "next": [[d2, str(t2), list(o2)] for d2, t2, o2, _, _ in rest],
                                     "seconds": round(time.perf_counter() - t0, 3)}) + "\n")
                fh.flush()


def _redo_searched(ks, min_nodes: int) -> None:
    """Rebuild the rows that are not proven (sample only, before local search existed) with the sample and
    local search, merged with the old row (`_merged`); every row gains its "how". Resumable: a row with a
    "climb" field is done. Order: the given offset counts, larger n first; the file is rewritten (atomically)
    after every 10 rows."""
    rows = pareto_rows()
    todo = [i for k in ks for i in sorted(range(len(rows)), key=lambda i: -rows[i]["n"])
            if rows[i]["k"] == k and rows[i]["n"] >= min_nodes and "climb" not in rows[i]
            and not _index()[(rows[i]["kind"], k, rows[i]["n"])].proven]
    for r in rows:
        if "how" not in r:
            r["how"] = _index()[(r["kind"], r["k"], r["n"])].how
    for done, i in enumerate(todo, 1):
        r = rows[i]
        t0, c0 = time.perf_counter(), time.process_time()
        p = _merged(pareto_offsets(r["n"], r["k"], r["kind"]), _index()[(r["kind"], r["k"], r["n"])])
        rows[i] = {**_row(r["kind"], r["k"], r["n"], p, time.perf_counter() - t0),
                   "cpu": round(time.process_time() - c0, 3)}
        if done % 10 == 0 or done == len(todo):
            _write(rows)
            print(f"{done}/{len(todo)} rows rebuilt (last: k = {r['k']}, n = {r['n']})", flush=True)
    if not todo:
        _write(rows)


def _write(rows: list[dict]) -> None:
    tmp = PARETO_TABLE.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(PARETO_TABLE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, action="append", help="only these offset counts")
    ap.add_argument("--max-nodes", type=int, default=400)
    ap.add_argument("--line", action="store_true", help="the line-digraph bases (dcirculant_line.jsonl)")
    ap.add_argument("--line-next", action="store_true",
                    help="re-do the line rows without a BW-optimal line digraph over the two smallest diameters")
    ap.add_argument("--redo-searched", action="store_true",
                    help="rebuild the rows not proven with local search (resumable; --k orders them)")
    ap.add_argument("--min-nodes", type=int, default=3, help="with --redo-searched: only rows of this many nodes up")
    args = ap.parse_args()
    if args.redo_searched:
        _redo_searched(args.k or (6, 7, 8, 5, 4, 3, 2), args.min_nodes)
        return
    if args.line or args.line_next:
        _build_lines(args.k or (5, 6, 7, 8, 4, 3, 2), 2 if args.line_next else 1)
        return
    done = {(r["kind"], r["k"], r["n"]) for r in pareto_rows()}
    with PARETO_TABLE.open("a") as fh:
        for kind, k, top in PARETO_KS:
            if args.k and k not in args.k:
                continue
            for n in range(3, min(top, args.max_nodes) + 1):
                if (kind, k, n) in done or k > domain(n, kind):
                    continue
                if (kind, k, n) in {(r["kind"], r["k"], r["n"]) for r in pareto_rows()}:
                    continue                   # written meanwhile by another builder process
                t0 = time.perf_counter()
                p = pareto_offsets(n, k, kind)
                fh.write(json.dumps(_row(kind, k, n, p, time.perf_counter() - t0)) + "\n")
                fh.flush()


if __name__ == "__main__":
    main()
