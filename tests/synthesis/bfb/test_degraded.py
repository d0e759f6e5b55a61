"""Schedules on any strongly connected digraph (issue 14): the remove() operator, irregular topologies, BFB on
degraded tori, circulants and generalized Kautz graphs checked against an independent LP (1) written here
with scipy and networkx, and the library function that re-plans after a failure."""
import itertools
from fractions import Fraction as F

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from services.synthesis.bfb.degraded import degraded_schedules
from services.synthesis.bfb.incremental import affected_receivers, bfb_allgather_near
from services.synthesis.bfb.lp import bfb_allgather, bfb_schedule
from services.synthesis.bfb.price import bfb_tau
from services.synthesis.schedule.cost import LinkModel, optimal_tau, tau_lower_bound
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.report import schedule_summary
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build
from services.synthesis.topology.expr import parse
from services.synthesis.topology.failures import remove_arcs
from services.synthesis.topology.graph import Topology, TopologyError

MB = float(1 << 20)
PAPER_LINKS = LinkModel.from_units(10, 100)


# ---------------------------------------------------------------------------------------------------
# arc lists written independently of the family constructors
# ---------------------------------------------------------------------------------------------------
def torus_arcs(a: int, b: int) -> list[tuple[int, int]]:
    out = []
    for x, y in itertools.product(range(a), range(b)):
        for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            out.append((x * b + y, (x + dx) % a * b + (y + dy) % b))
    return out


def circulant_arcs(n: int, *offsets: int) -> list[tuple[int, int]]:
    return [(i, (i + s * o) % n) for i in range(n) for o in offsets for s in (1, -1)]


def genkautz_arcs(d: int, m: int) -> list[tuple[int, int]]:
    return [(x, (-d * x - a) % m) for x in range(m) for a in range(1, d + 1)]


def lp1_tau(nodes: int, arcs: list[tuple[int, int]], degree: int) -> float:
    """tau = (d/N) sum_t max_u U_{u,t} with LP (1) solved per (u, t) by scipy's HiGHS, one variable per
    (source, in-arc), distances from networkx: nothing from the code under test."""
    g = nx.MultiDiGraph()
    g.add_nodes_from(range(nodes))
    g.add_edges_from(arcs)
    dist = dict(nx.all_pairs_shortest_path_length(g))
    diameter = max(max(row.values()) for row in dist.values())
    total = 0.0
    for t in range(1, diameter + 1):
        worst = 0.0
        for u in range(nodes):
            in_arcs = [w for (w, h) in arcs if h == u and w != u]
            sources = [v for v in range(nodes) if dist[v].get(u) == t]
            if not sources:
                continue
            pairs = [(i, k) for i, v in enumerate(sources) for k, w in enumerate(in_arcs) if dist[v][w] == t - 1]
            nv = len(pairs) + 1                      # x variables, then U
            c = np.zeros(nv)
            c[-1] = 1
            a_ub = np.zeros((len(in_arcs), nv))
            for j, (_, k) in enumerate(pairs):
                a_ub[k, j] = 1
            a_ub[:, -1] = -1
            a_eq = np.zeros((len(sources), nv))
            for j, (i, _) in enumerate(pairs):
                a_eq[i, j] = 1
            res = linprog(c, A_ub=a_ub, b_ub=np.zeros(len(in_arcs)), A_eq=a_eq, b_eq=np.ones(len(sources)),
                          bounds=[(0, 1)] * len(pairs) + [(0, None)], method="highs")
            assert res.status == 0
            worst = max(worst, res.fun)
        total += worst
    return degree / nodes * total


def without(arcs: list[tuple[int, int]], removed: list[tuple[int, int]]) -> list[tuple[int, int]]:
    rest = list(arcs)
    for a in removed:
        rest.remove(a)
    return rest


DEGRADED = [  # (family expression, independent arc list, removed arcs)
    ("torus(4, 4)", torus_arcs(4, 4), [(0, 1)]),
    ("torus(4, 4)", torus_arcs(4, 4), [(0, 1), (5, 6)]),
    ("torus(3, 5)", torus_arcs(3, 5), [(7, 2)]),
    ("torus(3, 5)", torus_arcs(3, 5), [(0, 5), (5, 0)]),
    ("circulant(13, 2, 3)", circulant_arcs(13, 2, 3), [(0, 2)]),
    ("circulant(13, 2, 3)", circulant_arcs(13, 2, 3), [(0, 2), (4, 1)]),
    ("circulant(16, 3, 4)", circulant_arcs(16, 3, 4), [(9, 5), (1, 13)]),
    ("genkautz(3, 20)", genkautz_arcs(3, 20), [(0, 19)]),
    ("genkautz(3, 20)", genkautz_arcs(3, 20), [(0, 19), (5, 2)]),
    ("genkautz(4, 30)", genkautz_arcs(4, 30), [(1, 25), (7, 0)]),
]


@pytest.mark.parametrize("family,arcs,removed", DEGRADED, ids=[f"{f}-{len(r)}" for f, _, r in DEGRADED])
def test_bfb_on_degraded_families_matches_an_independent_lp(family, arcs, removed):
    g = build(family)
    assert sorted(zip(g.tails.tolist(), g.heads.tolist())) == sorted(arcs)      # the arc list is the family
    expr = f"remove({family}, {', '.join(f'{a}>{b}' for a, b in removed)})"
    cut = build(expr)
    assert not cut.regular and cut.degree == g.degree and cut.arcs == g.arcs - len(removed)
    r = bfb_allgather(cut, workers=1)
    rest = without(arcs, removed)
    assert float(r.tau) == pytest.approx(lp1_tau(g.nodes, rest, g.degree), abs=1e-9)
    assert bfb_tau(cut) == (cut.diameter, r.tau)                         # the schedule-free evaluator agrees
    for collective in ALLGATHER_FAMILY:
        s = r.schedule if collective is Collective.ALLGATHER else bfb_schedule(cut, collective, workers=1)
        report = verify(s, cut)
        assert report.ok, report.violation
        phases = 2 if collective is Collective.ALLREDUCE else 1
        assert report.steps == phases * cut.diameter
        assert report.tau >= phases * tau_lower_bound(cut.nodes, cut.degree, cut.min_in_links)
    assert verify(r.schedule, cut).tau == r.tau


@st.composite
def strongly_connected(draw):
    """A random strongly connected digraph: a Hamiltonian cycle plus random arcs (parallel arcs and
    self-loops allowed), usually irregular."""
    n = draw(st.integers(3, 11))
    perm = draw(st.permutations(list(range(n))))
    arcs = [(perm[i], perm[(i + 1) % n]) for i in range(n)]
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    return n, arcs + extra


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strongly_connected())
def test_bfb_on_random_digraphs(case):
    n, arcs = case
    g = build(f"edges({n}, {', '.join(f'{a}>{b}' for a, b in arcs)})")
    assert g.degree == max(np.bincount(np.array(arcs).ravel()[::2], minlength=n).max(),
                           np.bincount(np.array(arcs).ravel()[1::2], minlength=n).max())
    r = bfb_allgather(g, workers=1)
    report = verify(r.schedule, g)
    assert report.ok, report.violation
    assert report.steps == g.diameter and report.tau == r.tau
    assert float(r.tau) == pytest.approx(lp1_tau(n, arcs, g.degree), abs=1e-9)
    assert r.tau >= tau_lower_bound(n, g.degree, g.min_in_links)
    rs = bfb_schedule(g, Collective.REDUCESCATTER, workers=1)
    assert verify(rs, g).ok


# ---------------------------------------------------------------------------------------------------
# the remove() operator and irregular topologies
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["remove(torus(4, 4), 0>1)", "remove(torus(4, 4), 0>1, 5>6)",
                                  "remove(line(circulant(8, 1, 2)), 1>9, 0>4)", "remove(ring(5, 2), 2>3)"])
def test_remove_parses_prints_and_builds(text):
    assert str(parse(text)) == text
    g = build(text)
    assert build(g.expr).expr == g.expr and str(parse(g.expr)) == g.expr
    assert np.array_equal(build(g.expr).tails, g.tails) and np.array_equal(build(g.expr).heads, g.heads)


def test_remove_canonical_form_sorts_and_folds():
    assert build("remove(circulant(8, 1, 2), 3>5, 0>1)").expr == "remove(circulant(8, 1, 2), 0>1, 3>5)"
    assert build("remove(remove(torus(3, 3), 4>5), 0>1)").expr == "remove(torus(3, 3), 0>1, 4>5)"
    assert build("remove( torus( 3,3 ),0 > 1 )").expr == "remove(torus(3, 3), 0>1)"


def test_remove_parallel_arcs_one_at_a_time():
    g = build("ring(4, 3)")
    one = build("remove(ring(4, 3), 0>1)")
    assert int(one.multiplicity([0], [1])[0]) == 2 and one.degree == 3
    two = build("remove(ring(4, 3), 0>1, 0>1)")
    assert int(two.multiplicity([0], [1])[0]) == 1
    cut = remove_arcs(g, [(0, 1, 0)])                  # a given lane: lanes 1 and 2 survive
    assert cut.removed.tolist() == [0] and cut.kept.tolist() == list(range(1, g.arcs))


@pytest.mark.parametrize("text,message", [
    ("remove(torus(3, 3), 0>4)", r"remove: torus\(3, 3\) has no arc 0>4"),
    ("remove(torus(3, 3), 0>1, 0>1)", r"has 1 arc 0>1, fewer than the removal names"),
    ("remove(torus(3, 3), 0>9)", r"node outside 0..8"),
    ("remove(ring(4), 0>1)", r"not strongly connected after the removal"),
    ("remove(torus(3, 3), 0>1, 0>2, 0>3, 0>6)", r"not strongly connected after the removal \(2 strong comp"),
    ("remove(torus(3, 3))", r"name at least one arc"),
    ("remove(torus(3, 3), 3)", r"arcs are written tail>head"),
    ("remove(3, 0>1)", r"first argument must be a topology"),
    ("line(remove(torus(3, 3), 0>1))", r"line: remove\(torus\(3, 3\), 0>1\) is not regular"),
    ("power(remove(torus(3, 3), 0>1), 2)", r"product: .* is not regular"),
    ("degree(remove(torus(3, 3), 0>1), 2)", r"degree: .* is not regular"),
    ("remove(hypercube(40), 0>1)", r"hypercube: \d+ nodes exceeds the limit"),
    ("remove(ring(2), 0>1, 1>0)", r"2 arcs named, but ring\(2\) has only 2"),
])
def test_remove_errors_are_clear(text, message):
    with pytest.raises(TopologyError, match=message):
        build(text)


def test_remove_arcs_library_errors():
    g = build("torus(3, 3)")
    with pytest.raises(TopologyError, match="no lane 1"):
        remove_arcs(g, [(0, 1, 1)])
    with pytest.raises(TopologyError, match="named twice"):
        remove_arcs(g, [(0, 1, 0), (0, 1, 0)])
    with pytest.raises(TopologyError, match="tail, head"):
        remove_arcs(g, [(0,)])


def test_irregular_topology_arrays_and_nominal_degree():
    g = build("edges(4, 0>1, 1>2, 2>3, 3>0, 0>2, 0>3)")
    assert not g.regular and g.degree == 3 and g.max_in_degree == 2 and g.min_in_links == 1
    assert g.in_arcs.shape == (4, 2) and (g.in_arcs[1] == [0, -1]).all()         # node 1: only 0>1
    assert (g.in_predecessors[1] == [0, 1]).all()                              # padding is the node itself
    assert g.out_neighbours.shape == (4, 3) and (g.out_neighbours[1] == [2, 1, 1]).all()
    assert g.distances_from([1])[0].tolist() == [3, 0, 1, 2]
    gt = g.transpose()
    assert gt.degree == 3 and gt.max_out_degree == 2                          # nominal degree kept
    with pytest.raises(TopologyError, match="below the largest out- or in-degree 2"):
        Topology(3, [0, 1, 2, 0], [1, 2, 0, 2], "x", degree=1)
    with pytest.raises(TopologyError, match="vertex-transitive topology is regular"):
        Topology(3, [0, 1, 2, 0], [1, 2, 0, 2], "x", vertex_transitive=True)


def test_summary_flags_on_an_irregular_topology():
    g = build("remove(torus(4, 4), 0>1)")
    r = bfb_allgather(g)
    s = schedule_summary(g, verify(r.schedule, g), 0.0)
    assert s["regular"] is False and s["degree"] == 4 and s["bw_optimal"] is False
    assert s["tau_lower_bound"] == pytest.approx(float(optimal_tau(16) * F(4, 3)))
    assert s["tau"] == pytest.approx(s["tau_lower_bound"])              # BFB meets the bound here
    assert s["moore_steps"] == 2 and s["moore_optimal"] is False
    full = schedule_summary(build("torus(4, 4)"), verify(bfb_allgather(build("torus(4, 4)")).schedule,
                                                          build("torus(4, 4)")), 0.0)
    assert full["regular"] is True and full["tau_lower_bound"] == full["optimal_tau"]


# ---------------------------------------------------------------------------------------------------
# re-planning after a failure
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("expr,failed", [("torus(4, 6)", [(0, 1)]), ("genkautz(4, 64)", [(0, 63), (5, 40)]),
                                         ("circulant(40)", [(0, 4), (9, 5)])])
def test_degraded_schedules_are_verified_and_slower(expr, failed):
    g = build(expr)
    out = degraded_schedules(g, failed, PAPER_LINKS, MB, verify_mode="all", prune=False)
    cut = out.topology
    assert cut.expr.startswith(f"remove({g.expr}, ")
    assert [(int(g.tails[a]), int(g.heads[a])) for a in out.degraded.removed] == sorted(failed)
    assert np.array_equal(g.tails[out.degraded.kept], cut.tails) and np.array_equal(g.heads[out.degraded.kept], cut.heads)
    full = bfb_allgather(g)
    before = PAPER_LINKS.time(g.diameter, full.tau, MB)
    for collective, cmp in out.comparisons.items():
        assert {c.scheduler for c in cmp.candidates} == {"bfb", "greedy"}
        assert all(c.verified for c in cmp.candidates)
        assert cmp.chosen.time_s == min(c.time_s for c in cmp.candidates)
        again = verify(cmp.chosen.schedule, cut, collective)
        assert again.ok and again.tau == cmp.chosen.tau
        phases = 2 if collective is Collective.ALLREDUCE else 1
        assert cmp.chosen.time_s >= phases * before * (1 - 1e-12)             # a failure never helps
    data = out.as_dict()
    assert data["expr"] == cut.expr and set(data["collectives"]) == {"allgather", "reducescatter", "allreduce"}
    assert data["collectives"]["allreduce"]["verified"] is True


def test_greedy_is_not_built_when_its_bound_already_loses():
    g = build("torus(8, 8)")
    small = degraded_schedules(g, [(0, 1)], PAPER_LINKS, MB)
    for cmp in small.comparisons.values():
        greedy = next(c for c in cmp.candidates if c.scheduler == "greedy")
        assert greedy.schedule is None and greedy.skipped.startswith("not built: at least")
        assert cmp.chosen.scheduler == "bfb" and cmp.chosen.verified
    # where BFB misses the topology's bound by more, the greedy schedule is built and, at 1 GB, served
    large = degraded_schedules(build("genkautz(4, 64)"), [(0, 63)], PAPER_LINKS, 1e9,
                               collectives=[Collective.ALLGATHER])
    cmp = large.comparisons[Collective.ALLGATHER]
    assert all(c.schedule is not None for c in cmp.candidates) and cmp.chosen.scheduler == "greedy"


def test_degraded_vertex_transitive_topology_solves_few_receivers_and_matches_the_full_solve():
    g = build("torus(8, 8)")
    cut = remove_arcs(g, [(0, 1), (9, 17)]).topology
    assert 0 < affected_receivers(cut, g).sum() < g.nodes // 2
    near, full = bfb_allgather_near(cut, g), bfb_allgather(cut, workers=1)
    assert np.array_equal(near.u_num * full.u_den, full.u_num * near.u_den) and near.tau == full.tau
    assert verify(near.schedule, cut).ok
    gt, ct = g.transpose(), cut.transpose()
    assert bfb_allgather_near(ct, gt).tau == bfb_allgather(ct, workers=1).tau
    assert bfb_allgather_near(cut, cut).tau == full.tau          # a reference without translation: full solve


def test_degraded_schedules_keep_per_link_costs():
    g = build("torus(3, 4)")
    bw = np.full(g.arcs, 25e9 / 8)
    bw[g.arc_index([1], [2], [0])[0]] = 5e9 / 8                       # one slow link survives the failure
    costs = LinkCosts(g, np.full(g.arcs, 1e-5), bw)
    out = degraded_schedules(g, [(0, 1)], costs, MB, collectives=[Collective.ALLGATHER])
    cut = out.topology
    assert np.array_equal(out.costs.bandwidth_Bps, bw[out.degraded.kept])
    slow = cut.arc_index([1], [2], [0])[0]
    assert out.costs.bandwidth_Bps[slow] == 5e9 / 8
    cmp = out.comparisons[Collective.ALLGATHER]
    assert {c.scheduler for c in cmp.candidates} == {"bfb-hetero", "bfb", "greedy"}
    by = {c.scheduler: c for c in cmp.candidates}
    # LP (14) prices the surviving slow link: step-synchronously no worse than LP (1), which ignores it
    assert by["bfb-hetero"].barrier_time_s <= by["bfb"].barrier_time_s
    # served: the fastest as the runtimes run it (TACOS here, on the links' own costs), verified
    assert cmp.chosen is min(cmp.candidates, key=lambda c: c.time_s) and cmp.chosen.verified
    with pytest.raises(ValueError, match="link costs are for"):
        degraded_schedules(build("torus(3, 3)"), [(0, 1)], costs, MB)


def test_a_disconnecting_failure_is_a_clear_error():
    with pytest.raises(TopologyError, match="not strongly connected"):
        degraded_schedules(build("ring(6)"), [(2, 3)], PAPER_LINKS, MB)
