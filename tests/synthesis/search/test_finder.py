"""The topology finder (paper section 5.4; Tables 4, 5, 7) and workload selection: every frontier entry is
priced exactly by the schedule that ships for it, per collective, and no entry dominates another."""
import random
from fractions import Fraction as F

import pytest

from services.synthesis.bfb.lp import bfb_allgather
from services.synthesis.bfb.price import bfb_tau
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective
from services.synthesis.schedule.verify import verify
from services.synthesis.search import expansions as ex
from services.synthesis.search.bases import DERIVED
from services.synthesis.search.construct import construct
from services.synthesis.search.finder import (FinderError, WorkloadItem, bounds, candidate_from_entry, frontier,
                                              frontier_entry, select)
from services.synthesis.search.pricing import price
from services.synthesis.topology.catalog import build
from services.synthesis.topology.expansions import line

AR, RS, AG = Collective.ALLREDUCE, Collective.REDUCESCATTER, Collective.ALLGATHER

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
    """Rows the derived/generative families and exact BFB on line digraphs beat outright."""
    def steps_at(n, tau):
        return min(c.steps for c in frontiers[n] if float(c.tau) <= tau + 5e-4)
    assert steps_at(64, 0.984) == 4            # paper Diamond^2: 6 (line(dcirculant(16, 1, 2, 3, 6)), BW-optimal)
    assert steps_at(128, 0.992) == 5           # paper BiRing(2,8) x UniRing(1,4)^2: 10
    assert steps_at(256, 0.996) == 6           # paper DBJMod(2,4)^2: 10 (BFB on a line digraph is BW-optimal)
    assert steps_at(512, 1.000) == 6           # paper: 11 (line(dcirculant(32, 1, 2, 5, 12), 2))
    assert steps_at(1024, 1.004) == 6          # paper L^2(Diamond^2): 8 (line(dcirculant(16, 1, 2, 3, 6), 3))
    assert steps_at(1024, 0.999) <= 10         # paper (UniRing(1,4) x UniRing(1,8))^2: 20


def test_frontier_is_pareto_and_sorted(frontiers):
    for n, f in frontiers.items():
        assert [c.steps for c in f] == sorted(c.steps for c in f)
        assert all(a.tau > b.tau for a, b in zip(f, f[1:]))
        assert f[-1].bw_optimal()                     # the last entry is BW-optimal (Table 4 pattern)
        assert f[0].steps <= bounds(n, 4)["steps"] + 1   # generalized Kautz: within one step of Moore
        assert all(c.nodes == n and c.degree == 4 for c in f)


@pytest.mark.parametrize("n", [32, 64, 128, 256, 1024])
def test_every_frontier_entry_ships_at_its_price(frontiers, n):
    for c in frontiers[n]:
        built = construct(c.expr)
        report = verify(built.schedule, built.topology)
        assert report.ok, (c.expr, report.violation)
        assert (built.topology.nodes, built.topology.degree) == (n, 4)
        assert (report.steps, report.tau) == (c.steps, c.tau) == (built.prediction.steps, built.prediction.tau), c.expr


# Table 4 (N = 1024, d = 4, alpha = 10 us, B = 100 Gbps, M = 1 MB = 2^20 bytes): allreduce 2 (T_L + T_B)
TABLE_4 = [("debruijn(4, 5)", 323.5), ("genkautz(4, 1024)", 323.5), ("line(circulant(16, 3, 4), 3)", 291.0),
           (f"line(power({DERIVED['diamond']}, 2), 2)", 328.4),
           (f"line(power({DERIVED['dbjmod(2,4)']}, 2))", 387.8),
           ("power(product(ring(4), ring(8)), 2)", 567.6)]


@pytest.mark.parametrize("expr,us", TABLE_4, ids=[r[0][:30] for r in TABLE_4])
def test_table_4_allreduce_times_are_matched_or_beaten(expr, us):
    """The allreduce of the schedules we ship (reduce-scatter + allgather, priced exactly) costs at most the
    paper's time; exact BFB beats Definition 1 on the line digraphs of Diamond^2 and DBJMod(2,4)^2."""
    ag, rs = price(expr), price(expr, transposed=True)
    link = LinkModel.from_units(10, 100)
    assert link.time(ag.steps + rs.steps, ag.tau + rs.tau, 2 ** 20) * 1e6 <= us + 0.05


def test_table_4_allreduce_schedule_is_verified():
    built = construct("line(circulant(16, 3, 4), 3)", Collective.ALLREDUCE)
    report = verify(built.schedule, built.topology)
    assert report.ok and (report.steps, report.tau) == (12, F(261, 128))
    assert LinkModel.from_units(10, 100).time(report.steps, report.tau, 2 ** 20) * 1e6 == pytest.approx(291.0, abs=0.05)


def test_table_4_bound():
    b = bounds(1024, 4)
    assert (b["steps"], b["tau"]) == (5, F(1023, 1024))
    assert bounds(1024, 4, AR) == {"steps": 10, "tau": F(1023, 512)}
    assert LinkModel.from_units(10, 100).time(10, F(1023, 512), 2 ** 20) * 1e6 == pytest.approx(267.6, abs=0.05)


# ----- the two cases of issue 9, with their exact values -------------------------------------------
def test_bfb_on_a_line_digraph_beats_definition_1():
    """line(dcirculant(50, 1, 32)): the base's optimal BFB costs 49/50, Definition 1's lift 1 (Theorem 10's
    value), BFB on the line digraph 99/100: the finder's price and the shipped schedule are the latter."""
    base = build("dcirculant(50, 1, 32)")
    assert bfb_tau(base) == (11, F(49, 50))
    lifted = ex.line_schedule(base, construct("dcirculant(50, 1, 32)").schedule, line(base))
    assert verify(lifted, line(base)).tau == 1
    p = price("line(dcirculant(50, 1, 32))")
    assert (p.steps, p.tau, p.method) == (12, F(99, 100), "bfb")
    built = construct("line(dcirculant(50, 1, 32))")
    report = verify(built.schedule, built.topology)
    assert report.ok and (report.steps, report.tau) == (12, F(99, 100))
    assert (built.prediction.steps, built.prediction.tau) == (12, F(99, 100))


def test_readme_frontier_1024_has_no_bounds_and_no_dominated_entry():
    """The README's old frontier 1024 4 listed line(power(dcirculant(16, 1, 7), 2)) at 11 steps with tau "a
    bound" 1; it costs 1023/1024 exactly, BW-optimal. No entry of the frontier is dominated by it now."""
    p = price("line(power(dcirculant(16, 1, 7), 2))")
    assert (p.steps, p.tau) == (11, F(1023, 1024))
    f = frontier(1024, 4)
    assert not any(c.steps >= 11 and c.tau >= F(1023, 1024) and (c.steps, c.tau) != (11, F(1023, 1024)) for c in f)
    assert all(price(c.expr).tau == c.tau for c in f)


def test_allreduce_priced_by_its_reduce_scatter():
    """genkautz(3, 22) is not reverse-symmetric: its reduce-scatter (BFB on the transpose) costs 18/11, so
    its allreduce costs 63/44 + 18/11 = 135/44, not twice the allgather (63/22); the shipped allreduce
    measures exactly that."""
    p, t = price("genkautz(3, 22)"), price("genkautz(3, 22)", transposed=True)
    assert (p.steps, p.tau, t.steps, t.tau) == (3, F(63, 44), 3, F(18, 11))
    built = construct("genkautz(3, 22)", Collective.ALLREDUCE)
    report = verify(built.schedule, built.topology)
    assert report.ok and (report.steps, report.tau) == (6, F(135, 44)) == (built.prediction.steps, built.prediction.tau)
    entry = next(c for c in frontier(22, 3, collective=AR) if c.expr == "genkautz(3, 22)")
    assert entry.cost(AR) == (6, F(135, 44)) and entry.cost(RS) == (3, F(18, 11))


# ----- Pareto-exactness over many sizes ------------------------------------------------------------
def _cases(count: int = 320, seed: int = 9):
    """(N, d, bidirectional): sizes where line digraphs compete with generative families (N = d^k m) and
    sizes between them, degrees 2..8, unidirectional and bidirectional."""
    rng = random.Random(seed)
    out = set()
    while len(out) < count:
        d = rng.choice([2, 3, 4, 4, 6, 8])
        n = rng.choice([d * rng.randint(3, 24), d * d * rng.randint(2, 6), rng.randint(4, 160)])
        out.add((n, d, rng.random() < 0.3))
    return sorted(out)


CASES = _cases()


def test_pareto_exactness_over_many_sizes():
    """For every case: entries sorted, no entry dominated by another, every cost exactly the price of the
    schedule that ships (the pricing engine); for a deterministic sample the schedules are built and
    measured by the model checker."""
    assert len(CASES) >= 300
    sample = set(random.Random(1).sample(range(len(CASES)), 40))
    for i, (n, d, bidi) in enumerate(CASES):
        f = frontier(n, d, bidirectional=bidi)
        assert f or (bidi and n * d % 2), (n, d, bidi)     # no duplex d-regular graph has n d odd
        costs = [(c.steps, c.tau) for c in f]
        assert costs == sorted(costs) and all(a[1] > b[1] for a, b in zip(costs, costs[1:])), (n, d, bidi, costs)
        for c in f:
            assert (c.nodes, c.degree) == (n, d) and (c.bidirectional or not bidi)
            p = price(c.expr)
            assert (p.steps, p.tau) == (c.steps, c.tau), (n, d, c.expr)
            if i in sample and n <= 96:
                built = construct(c.expr)
                report = verify(built.schedule, built.topology)
                assert report.ok and (report.steps, report.tau) == (c.steps, c.tau), (n, d, c.expr)


def test_line_entries_equal_bfb_on_the_built_line_digraph():
    """Independent check of the line pricing (bfb.line works from the base): the frontier's line entries cost
    what the model checker measures on LP (1)'s schedule for the explicit line digraph. (The bitset evaluator,
    bfb.price, overestimates some of them: on line(dcirculant(14, 1, 2, 3, 5)) it reports tau 1 where LP (1)
    reaches 55/56.)"""
    checked = 0
    for n, d, bidi in CASES[::4]:
        for c in frontier(n, d, bidirectional=bidi):
            if c.family == "line":
                g = build(c.expr)
                report = verify(bfb_allgather(g).schedule, g)
                assert report.ok and (report.steps, report.tau) == (c.steps, c.tau), c.expr
                checked += 1
    assert checked >= 20


def test_allreduce_frontiers_are_pareto_on_allreduce_costs():
    for n, d, bidi in CASES[::10]:
        f = frontier(n, d, bidirectional=bidi, collective=AR)
        costs = [c.cost(AR) for c in f]
        assert costs == sorted(costs) and all(a[1] > b[1] for a, b in zip(costs, costs[1:])), (n, d, costs)
        for c in f:
            ag, rs = price(c.expr), price(c.expr, transposed=True)
            assert c.cost(AR) == (ag.steps + rs.steps, ag.tau + rs.tau)
            if c.reverse_symmetric:
                assert c.cost(RS) == c.cost(AG)


# Table 5: best bidirectional topology per N at d = 4, all BW-optimal, allreduce T_L = 2 D
TABLE_5 = {5: 1, 6: 2, 7: 2, 8: 2, 9: 2, 10: 2, 11: 2, 12: 2}


@pytest.mark.parametrize("n,steps", TABLE_5.items())
def test_table_5_best_bidirectional_topologies(n, steps):
    f = frontier(n, 4, bidirectional=True)
    best = f[-1]
    assert best.bw_optimal() and best.bidirectional and best.steps == steps
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
        assert report.ok and (report.steps, report.tau) == (c.steps, c.tau)


@pytest.mark.parametrize("n,d", [(2, 1), (3, 2), (7, 4), (13, 4), (97, 4), (60, 8), (100, 16), (31, 2), (4096, 4)])
def test_any_size_has_a_valid_frontier(n, d):
    f = frontier(n, d)
    assert f and all(c.nodes == n and c.degree == d for c in f)
    assert min(c.tau for c in f) == F(n - 1, n)         # rings/circulants always give a BW-optimal entry


@pytest.mark.parametrize("n,d,collective", [(1, 4, "allgather"), (8193, 4, "allgather"), (16, 0, "allgather"),
                                            (16, 17, "allgather"), ("16", 4, "allgather"), (16, 4, "alltoall")])
def test_bad_finder_input(n, d, collective):
    with pytest.raises(FinderError):
        frontier(n, d, collective=collective)


def test_selection_follows_the_message_size():
    f = frontier(1024, 4, collective=AR)
    link = LinkModel.from_units(10, 100)
    small = select(f, link, [WorkloadItem(AR, 1024)])
    big = select(f, link, [WorkloadItem(AR, 1 << 30)])
    mid = select(f, link, [WorkloadItem(AR, 1 << 20)])
    assert small.best.steps == f[0].steps                 # latency-bound: fewest steps
    assert big.best.bw_optimal(AR)                        # bandwidth-bound: BW-optimal
    assert mid.best.steps == 6 and mid.best.tau <= F(261, 256)          # Table 4: L^3(C(16,{3,4})), 261/256
    # Table 4's 291.0 us, or less: line(dcirculant(16, 1, 2, 3, 6), 3) has tau 257/256
    assert dict((c.expr, t) for c, t in mid.times_s)[mid.best.expr] <= 291.0e-6 + 0.05e-6


def test_selection_uses_each_collectives_cost():
    """A workload's time is the sum of its items' (steps, tau) per collective: an allreduce on a graph that
    is not reverse-symmetric pays its reduce-scatter, not a second allgather."""
    link = LinkModel.from_units(10, 100)
    f = frontier(22, 3, collective=AR)
    items = [WorkloadItem(AR, 1 << 20, 3.0), WorkloadItem(AG, 1 << 26, 0.5), WorkloadItem(RS, 1 << 22, 1.0)]
    sel = select(f, link, items)
    for c, t in sel.times_s:
        expect = sum(i.weight * link.time(*c.cost(i.collective), i.size_bytes) for i in items)
        assert t == pytest.approx(expect)
    gk = next(c for c, _ in sel.times_s if c.expr == "genkautz(3, 22)")
    assert gk.cost(AR) != (2 * gk.steps, 2 * gk.tau)
    assert sel.best == min(sel.times_s, key=lambda x: x[1])[0]


def test_entries_round_trip_through_plans():
    """The entry dict a plan stores carries every collective's cost, so selection from it is exact."""
    for c in frontier(22, 3, collective=AR):
        e = frontier_entry(c, AR)
        back = candidate_from_entry(e)
        assert {k: back.cost(k) for k in ALLGATHER_FAMILY} == {k: c.cost(k) for k in ALLGATHER_FAMILY}
        assert (e["steps"], F(e["tau_exact"])) == c.cost(AR) and e["collective"] == "allreduce"


def test_selection_rejects_empty_or_bad_workloads():
    f = frontier(64, 4)
    link = LinkModel.from_units(10, 100)
    with pytest.raises(FinderError):
        select(f, link, [])
    with pytest.raises(FinderError):
        select(f, link, [WorkloadItem(AR, -5)])
    with pytest.raises(FinderError):
        select([], link, [WorkloadItem(AR, 5)])


def test_baseline_comparison_table_4():
    """Table 4 (N = 1024, d = 4, 1 MB allreduce): DBT 1434 us; our best 291.0 us beats every baseline."""
    from services.synthesis.evaluate.workload_baselines import baseline_times

    link = LinkModel.from_units(10, 100)
    items = [WorkloadItem(AR, 1 << 20)]
    base = baseline_times(1024, 4, link, items)
    assert base["double_binary_tree"] * 1e6 == pytest.approx(1434, abs=0.5)
    assert base["shifted_ring"] * 1e6 == pytest.approx(20640, rel=1e-3)     # paper's figure; see baselines.py
    best = select(frontier(1024, 4, collective=AR), link, items)
    ours = dict((c.expr, t) for c, t in best.times_s)[best.best.expr]
    assert all(ours < t for t in base.values())
    assert base["shifted_ring"] / ours > 50            # Fig. 7: ~56x at N ~ 1000


def test_alltoall_share_prefers_low_diameter():
    """An all-to-all heavy workload favours the lowest-diameter entry (paper 5.4: MoE / DLRM)."""
    from services.synthesis.evaluate.alltoall import alltoall_throughput

    f = frontier(64, 4)
    link = LinkModel.from_units(10, 100)
    fs = {c.expr: alltoall_throughput(build(c.expr)).throughput for c in f}
    heavy = select(f, link, [WorkloadItem(AR, 1024, 1.0)], alltoall_bytes=1 << 24,
                   alltoall_weight=100.0, alltoall_f=lambda c: fs[c.expr])
    assert fs[heavy.best.expr] == max(fs.values())
    with pytest.raises(FinderError):
        select(f, link, [WorkloadItem(AR, 1024)], alltoall_bytes=1, alltoall_weight=1.0)


def test_workload_selection_is_one_implementation(capsys):
    """`fabricplan select` and a plan's selection stage share select_workload: the throughputs it computes are
    LP (3)'s, the ones given are not computed again, and the CLI's choice is its choice."""
    import json

    from services.cli import main
    from services.synthesis.evaluate.alltoall import alltoall_throughput
    from services.synthesis.evaluate.workload_selection import select_workload

    f = frontier(16, 4)
    link = LinkModel.from_units(10, 100)
    items = [WorkloadItem(AR, 1024, 1.0)]
    counted = []
    sel, fs = select_workload(f, link, items, alltoall_bytes=1 << 24, alltoall_weight=100.0,
                              on_throughputs=counted.append)
    assert counted == [len(f)] and set(fs) == {c.expr for c in f}
    assert fs == {c.expr: alltoall_throughput(build(c.expr)).throughput for c in f}
    assert fs[sel.best.expr] == max(fs.values())
    again, _ = select_workload(f, link, items, alltoall_bytes=1 << 24, alltoall_weight=100.0, throughputs=fs,
                               on_throughputs=counted.append)
    assert counted == [len(f)] and again.best.expr == sel.best.expr          # nothing computed the second time
    assert select_workload(f, link, items)[1] == {}
    with pytest.raises(FinderError, match="alltoall_bytes"):
        select_workload(f, link, items, alltoall_weight=1.0)
    assert main(["select", "16", "4", "--alpha-us", "10", "--bandwidth-gbps", "100", "--size", "1024",
                 "--alltoall-bytes", str(1 << 24), "--alltoall-weight", "100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["expr"] == sel.best.expr
    assert out["best"]["time_us"] == pytest.approx(dict((c.expr, t) for c, t in sel.times_s)[sel.best.expr] * 1e6)


@pytest.mark.parametrize("d,n", [(2, 40), (2, 96), (3, 84), (4, 80), (4, 1024), (8, 144), (5, 150), (3, 22)])
def test_generalized_kautz_priced_as_a_line_digraph(d, n):
    """Pi_{d,dm} = L(Pi_{d,m}) (Imase-Itoh): priced from Pi_{d,m} by the line pricer; both orientations
    agree with the bitset evaluator on the graph itself."""
    topo = build(f"genkautz({d}, {n})")
    p, t = price(f"genkautz({d}, {n})"), price(f"genkautz({d}, {n})", transposed=True)
    assert (p.steps, p.tau) == bfb_tau(topo)
    assert (t.steps, t.tau) == bfb_tau(topo.transpose())
