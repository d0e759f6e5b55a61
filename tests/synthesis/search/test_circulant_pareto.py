"""Directed circulants on the (steps, tau) plane (services.synthesis.search.circulant_pareto): on small (n, k)
the search's Pareto set equals one found by pricing every offset set with `construct` and the model checker
(no unit symmetry used), every row of the offline tables is what it says (re-priced), and a row's `proven`
holds only when it is."""
from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from services.synthesis.schedule.verify import verify
from services.synthesis.bfb.kernels import circulant_eccentricities
from services.synthesis.search import circulant_pareto as cp
from services.synthesis.search import offset_climb
from services.synthesis.search.construct import construct


def _measured(expr: str) -> tuple[int, Fraction]:
    built = construct(expr)
    report = verify(built.schedule, built.topology)
    assert report.ok, (expr, report.violation)
    return report.steps, report.tau


def _expr(n: int, offs) -> str:
    return f"dcirculant({n}, {', '.join(map(str, offs))})"


def _brute_pareto(n: int, k: int) -> list[tuple[int, Fraction]]:
    """The Pareto set of (steps, tau) over every k-subset of 1..n-1 generating Z_n, each measured."""
    costs = set()
    for offs in itertools.combinations(range(1, n), k):
        try:
            costs.add(_measured(_expr(n, offs)))
        except ValueError:                    # does not generate Z_n
            continue
    out = []
    for s, t in sorted(costs):
        if not out or t < out[-1][1]:
            out.append((s, t))
    return out


@pytest.mark.parametrize("n,k", [(9, 2), (12, 3), (13, 3), (10, 4), (11, 4)])
def test_pareto_offsets_match_every_offset_set_measured(n, k):
    p = cp.pareto_offsets(n, k)
    assert p.exhaustive or p.proven
    assert [(d, t) for d, t, _ in p.entries] == _brute_pareto(n, k)
    for d, t, offs in p.entries:
        assert _measured(_expr(n, offs)) == (d, t)


def test_proven_needs_the_floor_met_bw_optimally_or_every_set():
    p = cp.pareto_offsets(84, 5, budget=0, sample=2_000)     # a small sample misses the 4-step sets
    assert not p.exhaustive and p.entries[0][0] > p.floor
    assert not p.proven


def _levels(n: int, offs) -> list[int]:
    """Node counts at each distance from 0, by a plain breadth-first search over x -> x + a (mod n)."""
    dist = {0: 0}
    frontier = [0]
    while frontier:
        nxt = []
        for x in frontier:
            for a in offs:
                y = (x + a) % n
                if y not in dist:
                    dist[y] = dist[x] + 1
                    nxt.append(y)
        frontier = nxt
    return [list(dist.values()).count(t) for t in range(max(dist.values()) + 1)] if len(dist) == n else []


def test_climb_scores_are_the_diameter_and_the_farthest_level():
    rng = random.Random(11)
    for _ in range(60):
        n = rng.randint(5, 150)
        offs = sorted(rng.sample(range(1, n), rng.randint(1, min(5, n - 1))))
        levels = _levels(n, offs)
        assert offset_climb.score(n, offs) == ((len(levels) - 1, levels[-1]) if levels else (n, 0)), (n, offs)
    found = offset_climb.climb(97, 4, seed=3, budget=20_000, patience=200)
    assert found.evaluated == 20_000 and len(found.rows) and (found.rows[:, 0] == 1).all()
    assert (circulant_eccentricities(97, found.rows) == found.diameters).all()


def test_local_search_finds_the_rare_six_step_sets_of_387_nodes():
    """(387, 6): about 3 in 100,000 sets have diameter 6 (the floor is 5); the fixed sample alone has none,
    the climbs find BW-optimal ones, and the table holds one."""
    assert cp.pareto_offsets(387, 6, climb_evals=0).entries[0][0] == 7
    p = cp.pareto_offsets(387, 6)
    assert p.entries[0][:2] == (6, Fraction(386, 387)) and p.climbed == cp.CLIMB_EVALS and p.how == "searched"
    row = cp.pareto_lookup(387, 6)
    assert row is not None and row.entries[0][:2] == (6, Fraction(386, 387))
    assert _measured(_expr(387, row.entries[0][2])) == (6, Fraction(386, 387))


def test_rows_say_how_they_were_obtained():
    for r in cp.pareto_rows():
        p = cp.pareto_lookup(r["n"], r["k"], r["kind"])
        assert r["how"] == p.how, r
        assert "climb" not in r or (r["climb"][0] > 0 and not r["exhaustive"]), r


def test_the_rare_four_step_sets_of_84_nodes_are_in_the_table():
    """(84, 5): 2 of the 6.0 million canonical offset sets have diameter 4 (the abelian Moore floor)."""
    row = cp.pareto_lookup(84, 5)
    assert row is not None and row.entries[0][:2] == (4, Fraction(83, 84)) and row.proven
    assert _measured(_expr(84, row.entries[0][2])) == (4, Fraction(83, 84))


def test_table_rows_price_as_recorded():
    rows = cp.pareto_rows()
    assert len(rows) > 100
    for r in random.Random(3).sample(rows, 12):
        for d, t, offs in r["entries"]:
            assert cp.bfb_tau(r["n"], offs) == (d, Fraction(t)), r
        steps = [d for d, _, _ in r["entries"]]
        taus = [Fraction(t) for _, t, _ in r["entries"]]
        assert steps == sorted(steps) and taus == sorted(taus, reverse=True) and steps[0] >= r["floor"]


def test_line_rows_price_as_recorded():
    rows = cp.line_rows()
    assert rows
    for r in random.Random(4).sample(rows, min(6, len(rows))):
        for d, tau, offs in [(r["diameter"], r["tau"], r["offsets"]), *r.get("next", [])]:
            assert _measured(f"line({_expr(r['n'], offs)})") == (d + 1, Fraction(tau)), r


def test_line_bases_go_to_the_next_diameter_when_the_least_gives_no_bw_optimal_line():
    """(80, 5): the one base of diameter 4 in the sample has a line digraph of tau 1; one of diameter 5 has a
    BW-optimal one (6 steps, 399/400), which a product of 7 steps at 399/400 must not beat."""
    first, *rest = cp.line_lookup(80, 5)
    assert first[:2] == (4, Fraction(1)) and rest and rest[0][:2] == (5, Fraction(399, 400))
