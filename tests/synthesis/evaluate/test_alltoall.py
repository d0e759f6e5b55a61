"""All-to-all throughput (maximum concurrent flow, LP (3)): paper Table 7 / Table 4 values, closed forms,
symmetry reductions against the full LP, and the certified bounds of the approximation."""
from __future__ import annotations

from functools import cache

import pytest

from services.synthesis.evaluate.alltoall import (
    AllToAllResult,
    alltoall_throughput,
    alltoall_time_s,
    distance_sum_bound,
    moore_throughput_bound,
)
from services.synthesis.topology.catalog import build

MB = 2 ** 20                      # the paper's "1MB"
NODE_BW = 100e9 / 8               # 100 Gbps per node, in bytes/s


def sig3(x: float) -> float:
    """x rounded to 3 significant digits, as printed in the paper's tables."""
    return float(f"{x:.2e}")


def a2a(expr: str, **kw) -> AllToAllResult:
    """alltoall_throughput of the catalog expression, computed once per (expression, options) in this process:
    several tests check the same (deterministic, frozen) result; test_approximation_is_deterministic computes
    its second result itself."""
    return _a2a(expr, tuple(sorted(kw.items())))


@cache
def _a2a(expr: str, options: tuple) -> AllToAllResult:
    return alltoall_throughput(build(expr), **dict(options))


def assert_certified(r: AllToAllResult) -> None:
    assert 0 < r.lower <= r.throughput <= r.upper
    assert r.relative_error == pytest.approx((r.upper - r.lower) / r.upper, abs=1e-15)
    if r.exact:
        assert r.relative_error <= 1e-5


# ----- Table 7: MCF values of the topologies this library builds -------------------------------------------

TABLE_7 = [
    ("line(bipartite(4))", 32, 5.71e-2),                          # L(K_{4,4})
    ("distreg(ag24_minus_parallel_class)", 32, 5.26e-2),          # DistReg(4, 32)
    ("genkautz(4, 64)", 64, 2.17e-2),                             # Pi_{4,64}
    ("line(bipartite(4), 2)", 128, 9.89e-3),                      # L^2(K_{4,4})
    ("line(distreg(ag24_minus_parallel_class))", 128, 9.26e-3),   # L(DistReg(4, 32))
    ("product(biring(8), power(ring(4), 2))", 128, 5.21e-3),      # BiRing(2,8) box UniRing(1,4)^{box 2}
    ("debruijn(4, 4)", 256, 4.04e-3),                             # DBJ(4, 4)
]


@pytest.mark.parametrize("expr, nodes, paper", TABLE_7)
def test_table7_mcf(expr, nodes, paper):
    r = a2a(expr)
    assert r.nodes == nodes and r.degree == 4
    assert r.exact and r.method in ("lp", "lp-symmetric")
    assert_certified(r)
    assert sig3(r.lower) == sig3(r.upper) == paper


def test_digest_section_11_digits():
    assert a2a("line(bipartite(4))").throughput == pytest.approx(0.05714, abs=5e-6)
    assert a2a("genkautz(4, 64)").throughput == pytest.approx(0.021708, abs=5e-7)


def test_l3_k44_matches_table7():
    # N = 512 row of Table 7 (1.88e-3); exact through the automorphisms L^3 inherits from K_{4,4}
    r = a2a("line(bipartite(4), 3)")
    assert r.exact and r.method == "lp-symmetric"
    assert sig3(r.throughput) == 1.88e-3


@pytest.mark.parametrize("nodes, paper", [(32, 5.80e-2), (64, 2.42e-2), (128, 1.00e-2), (256, 4.39e-3),
                                          (512, 1.90e-3), (1024, 8.57e-4)])
def test_table7_theoretical_bound(nodes, paper):
    assert sig3(moore_throughput_bound(nodes, 4)) == paper


def test_moore_bound_closed_forms():
    assert moore_throughput_bound(32, 4) == pytest.approx(4 / 69)           # 4 + 32 + 11 * 3
    assert moore_throughput_bound(1024, 4) == pytest.approx(4 / 4667)       # digest section 7
    assert moore_throughput_bound(5, 4) == 1.0                               # K_5
    for n in (2, 5, 9):                                                      # degree 1: the directed ring
        assert moore_throughput_bound(n, 1) == pytest.approx(2 / (n * (n - 1)))
    with pytest.raises(ValueError):
        moore_throughput_bound(1, 4)
    with pytest.raises(ValueError):
        moore_throughput_bound(16, 0)


# ----- Table 4: all-to-all times at N = 1024, d = 4, D = 1 MB, B = 100 Gbps --------------------------------

@pytest.mark.parametrize("f, micros", [(8.01e-4, 409.1),     # Pi_{4,1024}
                                       (8.12e-4, 403.5),     # L^3(C(16, {3, 4}))
                                       (4 / 4667, 382.3)])   # theoretical bound (8.57e-4 unrounded)
def test_table4_alltoall_time(f, micros):
    assert round(alltoall_time_s(f, 1024, 4, MB, NODE_BW) * 1e6, 1) == micros


def test_alltoall_time_from_bound_and_result():
    assert round(alltoall_time_s(moore_throughput_bound(1024, 4), 1024, 4, MB, NODE_BW) * 1e6, 1) == 382.3
    # the table's rounded 8.57e-4 gives 382.36 us: the paper used the unrounded bound
    assert alltoall_time_s(8.57e-4, 1024, 4, MB, NODE_BW) * 1e6 == pytest.approx(382.3, abs=0.1)
    r = a2a("torus(4, 4)")
    assert alltoall_time_s(r, 16, 4, MB, NODE_BW) == pytest.approx((MB / 16) / (r.throughput * NODE_BW / 4))
    assert r.time_s(MB, NODE_BW) == alltoall_time_s(r, 16, 4, MB, NODE_BW)
    with pytest.raises(ValueError):
        alltoall_time_s(0.0, 16, 4, MB, NODE_BW)


# ----- closed forms ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [3, 5, 8, 11])
def test_unidirectional_ring(n):
    # every pair (s, t) has one path, of length (t - s) mod n: each arc carries f (1 + 2 + ... + n-1)
    expected = 2 / (n * (n - 1))
    for method in ("lp-symmetric", "lp"):
        r = a2a(f"ring({n})", method=method)
        assert r.exact and r.throughput == pytest.approx(expected, rel=1e-9)
    assert a2a("ring(8)").throughput == pytest.approx(1 / 28, rel=1e-12)


def test_parallel_arcs_multiply_capacity():
    assert a2a("ring(5, 2)").throughput == pytest.approx(2 * 2 / 20, rel=1e-9)
    assert a2a("ring(5, 2)", method="lp").throughput == pytest.approx(0.2, rel=1e-6)


@pytest.mark.parametrize("n", [5, 7, 8, 10])
def test_bidirectional_ring(n):
    # n = 2k+1: sum of distances k(k+1); n = 2k: k^2; shortest paths load all 2n arcs equally
    k = n // 2
    expected = 2 / (k * (k + 1)) if n % 2 else 2 / k ** 2
    assert a2a(f"biring({n})").throughput == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_complete_graph(n):
    r = a2a(f"complete({n})")
    assert r.exact and r.throughput == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("m", [2, 3, 4])
def test_complete_bipartite(m):
    # Basu et al. (reference B.6): K_{n/2,n/2} with n = 2m nodes has f = n / (3n - 4)
    n = 2 * m
    assert a2a(f"bipartite({m})").throughput == pytest.approx(n / (3 * n - 4), rel=1e-9)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_hypercube(n):
    assert a2a(f"hypercube({n})").throughput == pytest.approx(2.0 ** (1 - n), rel=1e-9)


def test_large_torus_symmetric_is_fast_and_exact():
    r = a2a("torus(50, 50)")
    # even rings: sum of distances from a node is 50 * 625 + 50 * 625; shortest paths balance every arc
    assert r.method == "lp-symmetric" and r.exact
    assert r.throughput == pytest.approx(4 / 62500, rel=1e-9)
    assert r.seconds < 5.0


def test_debruijn_binary_one_ninth():
    # reference B.11: binary de Bruijn on 8 nodes, self-loops dropped: exactly 1/9
    assert a2a("debruijn(2, 3)", method="lp").throughput == pytest.approx(1 / 9, rel=1e-9)


# ----- symmetry reductions against the full LP (3) -------------------------------------------------------

@pytest.mark.parametrize("expr", ["torus(4, 6)", "hypercube(5)", "circulant(16, 3, 4)", "bipartite(4)",
                                  "twisted_torus(6, 3)", "product(biring(4), ring(3))"])
def test_translation_lp_equals_full_lp(expr):
    sym = a2a(expr, method="lp-symmetric")
    full = a2a(expr, method="lp")
    assert sym.method == "lp-symmetric" and full.method == "lp"
    assert sym.exact and full.exact
    assert sym.throughput == pytest.approx(full.throughput, rel=1e-5)


@pytest.mark.parametrize("expr", ["line(bipartite(4))", "debruijn(2, 5)", "kautz(2, 3)", "genkautz(4, 64)",
                                  "product(genkautz(2, 6), ring(3))", "degree(genkautz(2, 6), 2)",
                                  "line(circulant(7, 2, 3))"])
def test_orbit_lp_equals_full_lp(expr):
    # no translation, but a free automorphism group derived from the expression (line graph, digit
    # rotation, x -> -x - 1, products, degree expansion)
    sym = a2a(expr)
    full = a2a(expr, method="lp")
    assert sym.method == "lp-symmetric" and full.method == "lp"
    assert sym.exact and full.exact
    assert sym.throughput == pytest.approx(full.throughput, rel=1e-5)
    assert sym.lower <= full.upper and full.lower <= sym.upper


def test_no_symmetry_falls_back(monkeypatch):
    topo = build("distreg(ag24_minus_parallel_class)")
    with pytest.raises(ValueError):
        alltoall_throughput(topo, method="lp-symmetric")
    assert a2a("distreg(ag24_minus_parallel_class)").method == "lp"
    wide = alltoall_throughput(topo, exact_limit=16)             # above the limit: column generation
    assert wide.method == "colgen" and wide.relative_error <= 5e-3 and wide.throughput == wide.lower
    import services.synthesis.evaluate.alltoall as module

    monkeypatch.setattr(module, "COLGEN_MAX_NONZEROS", 1000)     # a master too large: aggregated columns
    agg = alltoall_throughput(topo, exact_limit=16)
    assert agg.method == "colgen" and agg.relative_error <= 5e-3
    assert agg.lower <= wide.upper * (1 + 1e-9) and agg.upper >= wide.lower * (1 - 1e-9)
    with pytest.raises(ValueError):
        alltoall_throughput(topo, method="simplex")


# ----- the approximation's certified bounds --------------------------------------------------------------

@pytest.mark.parametrize("expr", ["genkautz(4, 64)", "line(bipartite(4), 2)", "distreg(ag24_minus_parallel_class)",
                                  "genkautz(3, 50)", "debruijn(4, 4)"])
def test_approximation_brackets_the_lp(expr):
    exact = a2a(expr)
    approx = a2a(expr, method="approx")
    assert approx.method == "approx" and not approx.exact
    assert_certified(approx)
    # the optimum lies in [exact.lower, exact.upper] (gap <= 1e-5) and in [approx.lower, approx.upper]
    assert approx.lower <= exact.upper and approx.upper >= exact.lower
    assert approx.lower <= exact.throughput * (1 + 1e-5) and approx.upper >= exact.throughput * (1 - 1e-5)
    assert approx.upper <= distance_sum_bound(build(expr)) * (1 + 1e-12)
    assert approx.relative_error < 0.03


def test_approximation_is_deterministic():
    a = a2a("genkautz(3, 50)", method="approx")                          # computed before, or now
    b = alltoall_throughput(build("genkautz(3, 50)"), method="approx")   # computed again, here
    assert (a.lower, a.upper, a.throughput) == (b.lower, b.upper, b.throughput)


def test_distance_sum_bound_is_above_every_result():
    for expr in ("genkautz(4, 64)", "torus(4, 6)", "line(bipartite(4))"):
        r = a2a(expr)
        assert r.upper <= distance_sum_bound(build(expr)) * (1 + 1e-9)
        assert distance_sum_bound(build(expr)) <= moore_throughput_bound(r.nodes, r.degree) * (1 + 1e-12)


def test_genkautz_1024_approximation_contains_table7():
    r = a2a("genkautz(4, 1024)", method="approx")
    assert r.method == "approx" and not r.exact
    assert_certified(r)
    assert r.lower <= 8.015e-4 and r.upper >= 8.005e-4          # Table 7: 8.01e-4
    assert r.upper <= moore_throughput_bound(1024, 4)
    assert r.relative_error < 0.03
    assert r.throughput == r.lower                               # the value of an actual routing


def test_l2_distreg_approximation_contains_table7():
    # N = 512 row of Table 7: L^2(DistReg(4, 32)) = 1.78e-3 (no symmetry known; "auto" would run the column
    # generation, see bench/alltoall.py)
    r = a2a("line(distreg(ag24_minus_parallel_class), 2)", method="approx")
    assert r.method == "approx"
    assert r.lower <= 1.785e-3 and r.upper >= 1.775e-3
    assert r.relative_error < 0.03
