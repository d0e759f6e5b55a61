"""The database of minimum-diameter circulant offsets (paper section 5.4: the finder keeps "a database of
known base topologies"; App. F.4 for circulants).

Each row is the result of `circulants.exhaustive_offsets` for one (kind, k, n): the smallest diameter over
every offset set up to multiplication by a unit of Z_n (exact), with up to two sets that reach it. The rows
are computed offline, once, because an exhaustive search costs up to tens of seconds for one (n, k) (for
example C(n, {4 offsets}) at n = 300, where no set meets the abelian Moore bound and all 1.6 million
canonical sets must be evaluated); the finder reads them and searches at run time only beyond the table.
`tests/synthesis/search/test_circulants.py` rebuilds every row's circulant and checks its diameter,
and re-runs the exhaustive search on a sample of rows.

Regenerate (appends the rows not yet in the file, so it can be stopped and resumed):

    python -m services.synthesis.search.offset_table [--kind circulant|half|dcirculant]
"""
from __future__ import annotations

import argparse
import json
import time
from functools import lru_cache
from pathlib import Path

from services.synthesis.search.circulants import OffsetSearch, exhaustive_offsets

__all__ = ["TABLE", "TABLE_KS", "lookup", "rows"]

TABLE = Path(__file__).with_name("circulant_offsets.jsonl")
# (kind, k, largest n) tabulated: the undirected circulants of degree <= 8 (Theorem 22 settles k = 2) up to
# 400 nodes, and directed circulants as far as an exhaustive search stays within minutes per kind
TABLE_KS = (("half", 1, 400), ("half", 2, 400), ("circulant", 3, 400), ("half", 3, 400), ("circulant", 4, 400),
            ("dcirculant", 3, 400), ("dcirculant", 4, 100), ("dcirculant", 5, 48))


def rows() -> list[dict]:
    """Every row of the table file: {"kind", "k", "n", "floor", "found": [[diameter, [offsets]], ...]}."""
    if not TABLE.exists():
        return []
    return [json.loads(line) for line in TABLE.read_text().splitlines() if line.strip()]


@lru_cache(maxsize=1)
def _index() -> dict[tuple[str, int, int], OffsetSearch]:
    return {(r["kind"], r["k"], r["n"]): OffsetSearch(tuple((d, tuple(o)) for d, o in r["found"]), r["floor"], True)
            for r in rows()}


def lookup(n: int, k: int, kind: str) -> OffsetSearch | None:
    """The exhaustive result for (n, k, kind), or None when the table does not hold it."""
    return _index().get((kind, k, n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=["circulant", "half", "dcirculant"], help="only this kind")
    args = ap.parse_args()
    done = {(r["kind"], r["k"], r["n"]) for r in rows()}
    with TABLE.open("a") as fh:
        for kind, k, top in TABLE_KS:
            if args.kind and kind != args.kind:
                continue
            for n in range(3, top + 1):
                if (kind, k, n) in done:
                    continue
                t0 = time.perf_counter()
                r = exhaustive_offsets(n, k, kind)
                fh.write(json.dumps({"kind": kind, "k": k, "n": n, "floor": r.floor,
                                     "found": [[d, list(o)] for d, o in r.found]}) + "\n")
                fh.flush()
                if time.perf_counter() - t0 > 5:
                    print(f"{kind} k={k} n={n}: {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
