"""The topology finder (paper section 5.4; Tables 4, 5, 7) and workload selection."""
from fractions import Fraction as F

import pytest

from services.synthesis.search.bases import DERIVED
from services.synthesis.search.construct import construct
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.search.finder import FinderError, WorkloadItem, bounds, frontier, select
from services.synthesis.schedule.ir import Collective
from services.synthesis.schedule.verify import verify

# Table 7 (d = 4): (N, paper topology, steps, tau as printed). DBJMod and Diamond are not specified in the
# paper; our base database replaces them by derived graphs with the same (N, d, steps, tau) (bases.DERIVED:
# Diamond -> the digest's 8-node substitute, DBJMod(2,4) -> dcirculant(16, 1, 7), DBJMod(4,2) ->
# circulant(16, 3, 4)), and the finder matches or beats every row with them or with other families.
TABLE_7 = [
    (32, "L(K_{4,4})", 3, 1.000), (32, "DistReg(4,32)", 4, 0.969),
    (64, "Pi_{4,64}", 3, 1.312), (64, "L(DBJMod(4,2))", 4, 1.000), (64, "Diamond^2", 6, 0.984),
    (128, "L^2(K_{4,4})", 4, 1.031), (128, "L(DistReg(4,32))", 5, 1.000),
    (128, "BiRing(2,8) x UniRing(1,4)^2", 10, 0.992),
    (256, "DBJ(4,4)", 4, 1.328), (256, "L^2(DBJMod(4,2))", 5, 1.016), (256, "L(Diamond^2)", 7, 1.000),
    (256, "DBJMod(2,4)^2", 10, 0.996),
    (512, "L^3(K_{4,4})", 5, 1.039), (512, "L^2(DistReg(4,32))", 6, 1.008),
    (512, "L(UniRing(1,4)^3 x UniRing(1,2))", 11, 1.000), (512, "UniRing(1,4)^3 x UniRing(1,8)", 16, 0.998),
    (1024, "Pi_{4,1024}", 5, 1.332), (1024, "L^3(C(16,{3,4}))", 6, 1.020), (1024, "L^2(Diamond^2)", 8, 1.004),
    (1024, "L(DBJMod(2,4)^2)", 11, 1.000), (1024, "(UniRing(1,4) x UniRing(1,8))^2", 20, 0.999),
]


@pytest.fixture(scope="module")
def frontiers():
    return {n: frontier(n, 4) for n in (32, 64, 128, 256, 512, 1024)}


@pytest.mark.parametrize("n,name,steps,tau", TABLE_7, ids=[f"{r[0]}-{r[1]}" for r in TABLE_7])
def test_table_7_rows_are_matched_or_beaten(frontiers, n, name, steps, tau):
    hit = [c for c in frontiers[n] if c.steps <= steps and float(c.tau) <= tau + 5e-4]
    assert hit, f"no frontier entry matches {name} ({steps}, {tau}) at N={n}: {[(c.steps, c.tau) for c in frontiers[n]]}"


def test_table_7_strict_improvements(frontiers):
    """Rows the derived/generative families beat outright (fewer steps at the same tau)."""
    def steps_at(n, tau):
        return min(c.steps for c in frontiers[n] if float(c.tau) <= tau + 5e-4)
    assert steps_at(64, 0.984) == 5            # paper Diamond^2: 6
    assert steps_at(128, 0.992) == 7           # paper BiRing(2,8) x UniRing(1,4)^2: 10
    assert steps_at(256, 1.000) == 6           # paper L(Diamond^2): 7
    assert steps_at(512, 1.000) == 9           # paper: 11
    assert steps_at(1024, 1.004) == 7          # paper L^2(Diamond^2): 8
    assert steps_at(1024, 0.999) == 14         # paper (UniRing(1,4) x UniRing(1,8))^2: 20


def test_frontier_is_pareto_and_sorted(frontiers):
    for n, f in frontiers.items():
        assert [c.steps for c in f] == sorted(c.steps for c in f)
        assert all(a.tau > b.tau for a, b in zip(f, f[1:]))
        assert f[-1].bw_optimal                       # the last entry is BW-optimal (Table 4 pattern)
        assert f[0].steps <= bounds(n, 4)["steps"] + 1   # generalized Kautz: within one step of Moore
        assert all(c.nodes == n and c.degree == 4 for c in f)


@pytest.mark.parametrize("n", [32, 64, 128, 256, 1024])
def test_every_frontier_entry_builds_to_its_prediction(frontiers, n):
    for c in frontiers[n]:
        built = construct(c.expr)
        report = verify(built.schedule, built.topology)
        assert report.ok, (c.expr, report.violation)
        assert (built.topology.nodes, built.topology.degree) == (n, 4)
        assert (report.steps, report.tau) == (built.prediction.steps, built.prediction.tau) or not c.exact
        assert report.steps == c.steps, c.expr
        assert report.tau == c.tau if c.exact else report.tau <= c.tau, c.expr


# Table 4 (N = 1024, d = 4, alpha = 10 us, B = 100 Gbps, M = 1 MB = 2^20 bytes): allreduce 2 (T_L + T_B)
TABLE_4 = [("debruijn(4, 5)", 323.5), ("genkautz(4, 1024)", 323.5), ("line(circulant(16, 3, 4), 3)", 291.0),
           (f"line(power({DERIVED['diamond']}, 2), 2)", 328.4),
           (f"line(power({DERIVED['dbjmod(2,4)']}, 2))", 387.8),
           ("power(product(ring(4), ring(8)), 2)", 567.6)]


@pytest.mark.parametrize("expr,us", TABLE_4, ids=[r[0][:30] for r in TABLE_4])
def test_table_4_allreduce_times(expr, us):
    built = construct(expr, Collective.ALLREDUCE)
    report = verify(built.schedule, built.topology)
    assert report.ok
    link = LinkModel.from_units(10, 100)
    assert link.time(report.steps, report.tau, 2 ** 20) * 1e6 == pytest.approx(us, abs=0.05)


def test_table_4_bound():
    b = bounds(1024, 4)
    assert (b["steps"], b["tau"]) == (5, F(1023, 1024))
    assert LinkModel.from_units(10, 100).collective_time(Collective.ALLREDUCE, 5, b["tau"], 2 ** 20) * 1e6 == \
        pytest.approx(267.6, abs=0.05)


# Table 5: best bidirectional topology per N at d = 4, all BW-optimal, allreduce T_L = 2 D
TABLE_5 = {5: 1, 6: 2, 7: 2, 8: 2, 9: 2, 10: 2, 11: 2, 12: 2}


@pytest.mark.parametrize("n,steps", TABLE_5.items())
def test_table_5_best_bidirectional_topologies(n, steps):
    f = frontier(n, 4, bidirectional=True)
    best = f[-1]
    assert best.bw_optimal and best.bidirectional and best.steps == steps
    built = construct(best.expr, Collective.ALLREDUCE)
    report = verify(built.schedule, built.topology)
    assert report.ok and built.topology.bidirectional and report.steps == 2 * steps
    assert report.tau == 2 * F(n - 1, n)


@pytest.mark.parametrize("n", [16, 64, 100, 256])
def test_bidirectional_frontier_builds_bidirectional_topologies(n):
    for c in frontier(n, 4, bidirectional=True):
        assert c.bidirectional
        built = construct(c.expr)
        assert built.topology.bidirectional
        report = verify(built.schedule, built.topology)
        assert report.ok and report.steps == c.steps and (report.tau == c.tau or (not c.exact and report.tau <= c.tau))


@pytest.mark.parametrize("n,d", [(2, 1), (3, 2), (7, 4), (13, 4), (97, 4), (60, 8), (100, 16), (31, 2), (4096, 4)])
def test_any_size_has_a_valid_frontier(n, d):
    f = frontier(n, d)
    assert f and all(c.nodes == n and c.degree == d for c in f)
    assert min(c.tau for c in f) == F(n - 1, n)         # rings/circulants always give a BW-optimal entry


@pytest.mark.parametrize("n,d", [(1, 4), (4097, 4), (16, 0), (16, 17), ("16", 4)])
def test_bad_finder_input(n, d):
    with pytest.raises(FinderError):
        frontier(n, d)


def test_selection_follows_the_message_size():
    f = frontier(1024, 4)
    link = LinkModel.from_units(10, 100)
    small = select(f, link, [WorkloadItem(Collective.ALLREDUCE, 1024)])
    big = select(f, link, [WorkloadItem(Collective.ALLREDUCE, 1 << 30)])
    mid = select(f, link, [WorkloadItem(Collective.ALLREDUCE, 1 << 20)])
    assert small.best.steps == f[0].steps                 # latency-bound: fewest steps
    assert big.best.bw_optimal                            # bandwidth-bound: BW-optimal
    assert mid.best.steps == 6 and mid.best.tau == F(261, 256)          # Table 4: L^3(C(16,{3,4}))
    assert dict((c.expr, t) for c, t in mid.times_s)[mid.best.expr] == pytest.approx(291.0e-6, abs=0.05e-6)


def test_selection_with_weighted_sizes_is_the_weighted_sum():
    f = frontier(256, 4)
    link = LinkModel.from_units(10, 100)
    items = [WorkloadItem(Collective.ALLREDUCE, 1 << 20, 3.0), WorkloadItem(Collective.ALLGATHER, 1 << 26, 0.5)]
    sel = select(f, link, items)
    for c, t in sel.times_s:
        expect = 3 * 2 * (c.steps * 10e-6 + float(c.tau) * (1 << 20) * 8 / 100e9) + \
            0.5 * (c.steps * 10e-6 + float(c.tau) * (1 << 26) * 8 / 100e9)
        assert t == pytest.approx(expect)
    assert sel.best == min(sel.times_s, key=lambda x: x[1])[0]


def test_selection_rejects_empty_or_bad_workloads():
    f = frontier(64, 4)
    link = LinkModel.from_units(10, 100)
    with pytest.raises(FinderError):
        select(f, link, [])
    with pytest.raises(FinderError):
        select(f, link, [WorkloadItem(Collective.ALLREDUCE, -5)])
    with pytest.raises(FinderError):
        select([], link, [WorkloadItem(Collective.ALLREDUCE, 5)])


def test_baseline_comparison_table_4():
    """Table 4 (N = 1024, d = 4, 1 MB allreduce): DBT 1434 us; our best 291.0 us beats every baseline."""
    from services.synthesis.search.finder import baseline_times

    link = LinkModel.from_units(10, 100)
    items = [WorkloadItem(Collective.ALLREDUCE, 1 << 20)]
    base = baseline_times(1024, 4, link, items)
    assert base["double_binary_tree"] * 1e6 == pytest.approx(1434, abs=0.5)
    assert base["shifted_ring"] * 1e6 == pytest.approx(20640, rel=1e-3)     # paper's figure; see baselines.py
    best = select(frontier(1024, 4), link, items)
    ours = dict((c.expr, t) for c, t in best.times_s)[best.best.expr]
    assert all(ours < t for t in base.values())
    assert base["shifted_ring"] / ours > 50            # Fig. 7: ~56x at N ~ 1000


def test_alltoall_share_prefers_low_diameter():
    """An all-to-all heavy workload favours the lowest-diameter entry (paper 5.4: MoE / DLRM)."""
    from services.synthesis.evaluate.alltoall import alltoall_throughput
    from services.synthesis.topology.catalog import build

    f = frontier(64, 4)
    link = LinkModel.from_units(10, 100)
    fs = {c.expr: alltoall_throughput(build(c.expr)).throughput for c in f}
    heavy = select(f, link, [WorkloadItem(Collective.ALLREDUCE, 1024, 1.0)], alltoall_bytes=1 << 24,
                   alltoall_weight=100.0, alltoall_f=lambda c: fs[c.expr])
    assert fs[heavy.best.expr] == max(fs.values())
    with pytest.raises(FinderError):
        select(f, link, [WorkloadItem(Collective.ALLREDUCE, 1024)], alltoall_bytes=1, alltoall_weight=1.0)


@pytest.mark.parametrize("d,n", [(2, 40), (2, 96), (3, 84), (4, 80), (4, 1024), (8, 144), (5, 150)])
def test_generalized_kautz_priced_as_a_line_digraph(d, n):
    """Pi_{d,dm} = L(Pi_{d,m}): the finder prices it from Pi_{d,m} by Theorem 10 without a BFB solve; the
    direct BFB of the graph agrees, and so does the schedule built and model-checked."""
    from services.synthesis.search.bases import genkautz_candidate
    from services.synthesis.bfb.price import bfb_tau
    from services.synthesis.topology.catalog import build

    c = genkautz_candidate(d, n)
    topo = build(f"genkautz({d}, {n})")
    assert (c.steps, c.tau) == bfb_tau(topo)
    assert (c.diameter, c.self_loops, c.simple) == (topo.diameter, topo.self_loops,
                                                    not topo.self_loops and not topo.multi_arcs)
