"""Minimum-diameter circulant offsets (services.synthesis.search.circulants, offset_table): the canonical
sets up to units of Z_n lose no diameter against every subset, the abelian Moore floor is a floor, and every
row of the offline table builds a circulant of the diameter it records."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from services.synthesis.bfb.kernels import circulant_eccentricities
from services.synthesis.search import offset_table
from services.synthesis.search.circulants import (
    KINDS,
    best_offsets,
    diameter_floor,
    domain,
    exhaustive_offsets,
    generators,
)
from services.synthesis.topology.catalog import build


def _expr(n: int, offsets, kind: str) -> str:
    name = "dcirculant" if kind == "dcirculant" else "circulant"
    offs = tuple(offsets) + ((n // 2,) if kind == "half" else ())
    return f"{name}({n}, {', '.join(map(str, offs))})"


def _brute_min_diameter(n: int, k: int, kind: str) -> int | None:
    """The smallest diameter over every k-subset of the offsets (no symmetry used), by building each graph."""
    best = None
    for offs in itertools.combinations(range(1, domain(n, kind) + 1), k):
        try:
            d = build(_expr(n, offs, kind)).diameter
        except ValueError:                    # disconnected
            continue
        best = d if best is None else min(best, d)
    return best


@pytest.mark.parametrize("kind,k,sizes", [("circulant", 2, range(5, 31)), ("circulant", 3, range(7, 27)),
                                          ("half", 1, range(4, 31, 2)), ("half", 2, range(6, 27, 2)),
                                          ("dcirculant", 2, range(3, 26)), ("dcirculant", 3, range(4, 19))])
def test_canonical_sets_reach_the_smallest_diameter_of_all_sets(kind, k, sizes):
    for n in sizes:
        want = _brute_min_diameter(n, k, kind)
        got = exhaustive_offsets(n, k, kind)
        if want is None:
            assert not got.found
            continue
        assert got.found[0][0] == want, (n, k, kind)
        assert diameter_floor(n, k, kind) <= want
        for d, offs in got.found:
            assert build(_expr(n, offs, kind)).diameter == d


@pytest.mark.parametrize("kind", KINDS)
def test_best_offsets_report_the_built_diameter(kind):
    for n, k in ((50, 2), (97, 3), (64, 4), (130, 3)):
        if kind == "half" and n % 2:
            continue
        got = best_offsets(n, k, kind)
        assert got.found
        for diameter, offs in got.found:
            assert build(_expr(n, offs, kind)).diameter == diameter >= got.floor


def test_the_floor_is_met_by_the_issue_example_and_proves_it():
    # circulant(100, 1, 10, 35, 48): diameter 3, the abelian Moore bound of 4 offsets on 100 nodes
    assert diameter_floor(100, 4, "circulant") == 3
    assert build("circulant(100, 1, 10, 35, 48)").diameter == 3
    table = offset_table.lookup(100, 4, "circulant")
    if table is not None:
        assert table.found[0][0] == 3 and table.proven


def test_every_table_row_builds_its_diameter():
    rows = offset_table.rows()
    assert rows, "the offset table is empty"
    for r in rows:
        n, kind = r["n"], r["kind"]
        assert r["floor"] == diameter_floor(n, r["k"], kind)
        for d, offs in r["found"]:
            assert len(offs) == r["k"] and all(1 <= a <= domain(n, kind) for a in offs)
            gens = generators(n, np.array([offs]), kind)
            assert circulant_eccentricities(n, gens)[0] == d >= r["floor"]
        assert [d for d, _ in r["found"]] == sorted(d for d, _ in r["found"])


def test_sampled_table_rows_match_a_fresh_exhaustive_search():
    rows = [r for r in offset_table.rows() if r["n"] <= 120]
    for r in random.Random(7).sample(rows, min(12, len(rows))):
        fresh = exhaustive_offsets(r["n"], r["k"], r["kind"])
        assert [d for d, _ in fresh.found][:1] == [d for d, _ in r["found"]][:1], r
