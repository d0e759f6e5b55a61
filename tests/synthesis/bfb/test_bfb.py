"""BFB schedules (paper section 6, App. E): the digest's section 11 test vectors and the optimality claims.
Every schedule here is model-checked and its measured (steps, tau) compared with the LP prediction."""
from fractions import Fraction as F

import math
import numpy as np
import pytest
from ortools.linear_solver import pywraplp

from services.synthesis.bfb.lp import (BfbContext, ScheduleTooLarge, _flow, _min_max_load_zeta, bfb_allgather,
                                    bfb_schedule, receiver_types)
from services.synthesis.topology.catalog import build
from services.synthesis.schedule.cost import measured_tau, optimal_tau
from services.synthesis.topology.distreg import CATALOGUE
from services.synthesis.topology.families import theorem22_offsets
from services.synthesis.schedule.ir import Collective
from services.synthesis.topology.graph import Topology
from services.synthesis.schedule.verify import verify

DIAMOND_SUBSTITUTE = ("edges(8, 0>1, 0>4, 1>3, 1>5, 2>1, 2>7, 3>4, 3>6, 4>2, 4>5, 5>6, 5>7, "
                      "6>0, 6>2, 7>0, 7>3)")

# digest section 11: (expression, N, d, diameter, optimal-BFB tau)
SECTION_11 = [
    ("bipartite(2)", 4, 2, 2, F(3, 4)),
    ("bipartite(4)", 8, 4, 2, F(7, 8)),
    ("complete(5)", 5, 4, 1, F(4, 5)),
    ("degree(complete(3), 2)", 6, 4, 2, F(5, 6)),
    ("circulant(7, 2, 3)", 7, 4, 2, F(6, 7)),
    ("hamming(2, 3)", 9, 4, 2, F(8, 9)),
    ("degree(biring(5), 2)", 10, 4, 2, F(9, 10)),
    ("circulant(11, 2, 3)", 11, 4, 2, F(10, 11)),
    ("circulant(12, 2, 3)", 12, 4, 2, F(11, 12)),
    ("circulant(16, 3, 4)", 16, 4, 3, F(15, 16)),
    ("line(circulant(16, 3, 4))", 64, 4, 4, F(1)),
    ("line(bipartite(4))", 32, 4, 3, F(1)),
    ("genkautz(4, 64)", 64, 4, 3, F(21, 16)),          # 1.3125, Table 7 "1.312"
    ("debruijn(4, 4)", 256, 4, 4, F(85, 64)),          # 1.328, Table 7
    ("genkautz(4, 1024)", 1024, 4, 5, F(341, 256)),    # 1.33203, Tables 4 and 7
    ("kautz(2, 2)", 12, 2, 3, F(7, 6)),                # Cor. 10.1: 1.1667
    ("kautz(4, 2)", 80, 4, 3, F(21, 20)),              # Cor. 10.1: 1.05
    ("dcirculant(4, 1, 2)", 4, 2, 2, F(3, 4)),
    ("dcirculant(5, 1, 2, 3)", 5, 3, 2, F(4, 5)),
    ("dcirculant(6, 1, 2, 3, 4)", 6, 4, 2, F(5, 6)),
    ("dcirculant(8, 1, 2, 3, 4, 5, 6)", 8, 6, 2, F(7, 8)),
    ("biring(7)", 7, 2, 3, F(6, 7)),
    ("biring(8)", 8, 2, 4, F(7, 8)),
    ("product(ring(4), ring(8))", 32, 2, 10, F(31, 32)),
    ("torus(5, 7)", 35, 4, 5, F(34, 35)),
    ("torus(4, 6)", 24, 4, 5, F(23, 24)),
    ("torus(3, 3, 3)", 27, 6, 3, F(26, 27)),
    ("torus(3, 3, 2)", 18, 5, 3, F(17, 18)),            # size-2 dimension = one duplex link: optimal
    ("product(torus(3, 3), ring(2, 2))", 18, 6, 3, F(1)),  # two parallel arcs instead: NOT optimal
    ("torus(3, 3, 3, 2)", 54, 7, 4, F(53, 54)),
    (DIAMOND_SUBSTITUTE, 8, 2, 3, F(7, 8)),
]


def checked(expr: str, collective=Collective.ALLGATHER, **kw):
    topo = build(expr)
    sched = bfb_schedule(topo, collective, **kw)
    report = verify(sched, topo)
    assert report.ok, report.violation
    return topo, sched, report


@pytest.mark.parametrize("expr,n,d,diameter,tau", SECTION_11, ids=[r[0][:40] for r in SECTION_11])
def test_section_11_vectors(expr, n, d, diameter, tau):
    topo = build(expr)
    result = bfb_allgather(topo)
    assert (topo.nodes, topo.degree, topo.diameter) == (n, d, diameter)
    assert result.tau == tau
    report = verify(result.schedule, topo)
    assert report.ok, report.violation
    assert report.steps == diameter          # Theorem 15: T_L = alpha D(G)
    assert report.tau == tau                 # measured from the schedule = LP prediction


def test_figure_1_k22_schedule():
    """Fig. 1: K_{2,2} with parts {a, b} | {c, d}; a sends S to c and d, then c and d each send half to b."""
    topo = build("bipartite(2)")          # parts are the even and the odd labels: a=0, b=2 | c=1, d=3
    sched = bfb_allgather(topo).schedule
    rows = [r for r in sched.tuples() if r[0][0] == 0]
    step1 = sorted((u, w, c) for (v, c), (u, w, _), t in rows if t == 1)
    assert step1 == [(0, 1, (F(0), F(1))), (0, 3, (F(0), F(1)))]
    step2 = sorted((u, w, c) for (v, c), (u, w, _), t in rows if t == 2)
    assert [(u, w) for u, w, _ in step2] == [(1, 2), (3, 2)]
    halves = sorted(c for _, _, c in step2)
    assert halves == [(F(0), F(1, 2)), (F(1, 2), F(1))]
    report = verify(sched, topo)
    assert report.ok and report.steps == 2 and report.tau == F(3, 4)


@pytest.mark.parametrize("expr", ["torus(3, 5)", "torus(4, 6)", "torus(2, 3, 5)", "torus(6, 8)", "torus(3, 4, 5)",
                                  "torus(7, 2)", "torus(10, 3)"])
def test_tori_with_unequal_dimensions_are_bw_optimal(expr):
    topo, sched, report = checked(expr)
    dims = [int(x) for x in expr[6:-1].split(",")]
    assert report.steps == sum(x // 2 for x in dims)           # T_L = sum floor(d_i / 2)
    assert report.tau == optimal_tau(topo.nodes)


@pytest.mark.parametrize("n", range(1, 9))
def test_hypercubes_are_bw_optimal(n):
    topo, _, report = checked(f"hypercube({n})")
    assert report.steps == n and report.tau == optimal_tau(2 ** n)


@pytest.mark.parametrize("n,q", [(2, 3), (2, 4), (2, 5), (3, 3), (3, 4), (4, 3), (2, 7)])
def test_hamming_graphs_are_bw_optimal(n, q):
    topo, _, report = checked(f"hamming({n}, {q})")
    assert report.steps == n and report.tau == optimal_tau(q ** n)


@pytest.mark.parametrize("n", [7, 12, 16, 25, 40, 61, 100, 150])
def test_theorem_22_circulants_are_bw_optimal(n):
    m = math.ceil((-1 + math.sqrt(2 * n - 1)) / 2)
    assert theorem22_offsets(n) == (m, m + 1)
    topo, _, report = checked(f"circulant({n})")
    assert topo.expr == f"circulant({n}, {m}, {m + 1})"
    assert report.steps == m and report.tau == optimal_tau(n)


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_distance_regular_graphs_are_bw_optimal(name):
    """Theorem 18: distance-regular graphs have BW-optimal BFB schedules; T_L = diameter (Table 8)."""
    topo, _, report = checked(f"distreg({name})")
    assert report.steps == CATALOGUE[name].diameter
    assert report.tau == optimal_tau(topo.nodes)


def test_twisted_torus_is_bw_optimal():
    for expr in ("twisted_torus(8, 4)", "twisted_torus(12, 6)", "twisted_torus(10, 5, 3)"):
        topo, _, report = checked(expr)
        assert report.tau == optimal_tau(topo.nodes), expr


@pytest.mark.parametrize("expr", ["genkautz(4, 64)", "genkautz(3, 50)", "debruijn(2, 5)", "kautz(3, 2)",
                                  "torus(4, 6)", "line(bipartite(3))", "ring(5, 2)", DIAMOND_SUBSTITUTE])
def test_reduce_scatter_and_allreduce(expr):
    """RS = reverse of the BFB allgather on G^T (Cor. 1.1), AR = RS + AG; both model-checked."""
    topo = build(expr)
    ag = bfb_allgather(topo)
    _, rs, r_rs = checked(expr, Collective.REDUCESCATTER)
    _, ar, r_ar = checked(expr, Collective.ALLREDUCE)
    assert r_rs.steps == topo.diameter and r_ar.steps == 2 * topo.diameter
    rs_tau = bfb_allgather(topo.transpose()).tau
    assert r_rs.tau == rs_tau and r_ar.tau == rs_tau + ag.tau


@pytest.mark.parametrize("expr", ["torus(4, 6)", "hypercube(5)", "circulant(25)", "hamming(2, 4)", "biring(9)",
                                  "bipartite(5)", "twisted_torus(8, 4)", "dcirculant(7, 1, 3)", "ring(6, 3)",
                                  "product(ring(3), biring(4))"])
def test_translation_shortcut_equals_full_solve(expr):
    topo = build(expr)
    assert topo.translation is not None
    fast = bfb_allgather(topo)
    full = bfb_allgather(topo, shortcut=False, workers=1)
    assert fast.used_shortcut and not full.used_shortcut
    assert np.array_equal(fast.u_num * full.u_den, full.u_num * fast.u_den)   # every U_{u,t} equal
    assert fast.tau == full.tau
    for r in (fast, full):
        report = verify(r.schedule, topo)
        assert report.ok and report.tau == fast.tau


def test_parallel_blocks_equal_serial_solve():
    topo = build("genkautz(4, 300)")
    serial = bfb_allgather(topo, workers=1)
    parallel = bfb_allgather(topo, workers=2)
    assert serial.tau == parallel.tau
    for k, v in serial.schedule.columns().items():
        assert np.array_equal(v, getattr(parallel.schedule, k)), k


def test_forked_blocks_in_a_daemonic_process_equal_serial_solve(monkeypatch):
    """A daemonic process (a job process: no pool) solves its blocks in forked children (lp.forked_blocks):
    the same schedule as one process; a child that fails has its block solved in the parent."""
    import multiprocessing
    import os

    from services.synthesis.bfb import lp

    topo = build("genkautz(4, 512)")                    # N D >= 2048: worth splitting
    serial = bfb_allgather(topo, workers=1)
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True)
    calls = []
    real = lp.forked_blocks
    monkeypatch.setattr(lp, "forked_blocks", lambda ctx, parts: calls.append(len(parts)) or real(ctx, parts))
    parent = os.getpid()
    solve = lp.solve_block

    def failing_in_children(ctx, receivers):
        if os.getpid() != parent:
            raise RuntimeError("a child that fails")
        return solve(ctx, receivers)

    for patch in (False, True):
        if patch:
            monkeypatch.setattr(lp, "solve_block", failing_in_children)
        forked = bfb_allgather(topo, workers=3)
        assert forked.tau == serial.tau
        for k, v in serial.schedule.columns().items():
            assert np.array_equal(v, getattr(forked.schedule, k)), k
    assert calls == [3, 3]
    bfb_allgather(topo)                                  # workers not asked for: one process, as before
    assert calls == [3, 3]


@pytest.mark.parametrize("expr", ["genkautz(4, 64)", "debruijn(3, 3)", "line(circulant(9, 2))", "hypercube(5)"])
def test_min_cut_method_equals_subset_sums(expr):
    topo = build(expr)
    a = bfb_allgather(topo, method="zeta", shortcut=False, workers=1)
    b = bfb_allgather(topo, method="cut", shortcut=False, workers=1)
    assert np.array_equal(a.u_num * b.u_den, b.u_num * a.u_den)
    assert verify(b.schedule, topo).ok


def _random_regular(n: int, d: int, seed: int) -> Topology:
    rng = np.random.default_rng(seed)
    while True:
        tails = np.repeat(np.arange(n), d)
        heads = np.concatenate([rng.permutation(n) for _ in range(d)])
        heads = heads.reshape(d, n).T.ravel()
        try:
            return Topology(n, tails, heads, f"random({n}, {d}, {seed})")
        except ValueError:
            continue


def _lp1_glop(topo: Topology, u: int, t: int) -> float:
    """LP (1) exactly as the paper states it, one variable per (source, in-arc)."""
    dist = topo.distance_matrix
    arcs = topo.in_arcs[u]
    solver = pywraplp.Solver.CreateSolver("GLOP")
    U = solver.NumVar(0, solver.infinity(), "U")
    per_arc = {int(a): [] for a in arcs}
    for v in np.flatnonzero(dist[:, u] == t):
        xs = []
        for a in arcs:
            w = topo.tails[a]
            if dist[v, w] == t - 1:
                x = solver.NumVar(0, 1, "")
                xs.append(x)
                per_arc[int(a)].append(x)
        solver.Add(sum(xs) == 1)
    for xs in per_arc.values():
        solver.Add(sum(xs) <= U if xs else U >= 0)
    solver.Minimize(U)
    assert solver.Solve() == pywraplp.Solver.OPTIMAL
    return U.solution_value()


@pytest.mark.parametrize("seed", range(6))
def test_exact_optimum_equals_lp_1(seed):
    """U*_{u,t} from the max-flow/min-cut formula equals LP (1) solved by GLOP, on random digraphs
    (with parallel arcs and self-loops) and every (u, t)."""
    topo = _random_regular(14, 3, seed)
    r = bfb_allgather(topo, workers=1)
    for u in range(topo.nodes):
        for t in range(1, topo.diameter + 1):
            if (topo.distance_matrix[:, u] == t).any():
                assert float(r.u(u, t)) == pytest.approx(_lp1_glop(topo, u, t), abs=1e-9)
    assert verify(r.schedule, topo).ok


def test_figure_5_worked_example():
    """App. E: v1 via w1 or w2, v2 via w2 or w3: U = 2/3, each link carries 2/3 of a shard."""
    counts = np.zeros((1, 8), dtype=np.int64)
    counts[0, 0b011] = 1
    counts[0, 0b110] = 1
    num, den = _min_max_load_zeta(counts, 3)
    assert F(int(num[0]), int(den[0])) == F(2, 3)
    ok, flows = _flow([0b011, 0b110], [1, 1], 3, demand=3, capacity=2)
    assert ok
    loads = [sum(f[k] for f in flows) for k in range(3)]
    assert loads == [2, 2, 2]
    assert [sum(f) for f in flows] == [3, 3]


@pytest.mark.parametrize("expr,chunks", [("genkautz(4, 64)", 4), ("genkautz(4, 64)", 16), ("hypercube(5)", 3),
                                         ("circulant(16, 3, 4)", 2), ("debruijn(2, 5)", 7)])
def test_discrete_chunked_bfb(expr, chunks):
    """App. E.2 with P chunks per shard: integral, valid, and within Theorem 20's bound of the LP."""
    topo = build(expr)
    frac = bfb_allgather(topo)
    disc = bfb_allgather(topo, chunks=chunks)
    s = disc.schedule
    assert s.grid == chunks
    report = verify(s, topo)
    assert report.ok and report.tau == disc.tau and report.steps == topo.diameter
    d, n, D = topo.degree, topo.nodes, topo.diameter
    assert frac.tau <= disc.tau
    assert disc.tau - frac.tau < F(d * D, n * chunks)   # ceil(P U*) adds < 1 chunk per step
    assert disc.tau - frac.tau <= F(d * (d ** D - 1), (d - 1) * chunks * n)   # Theorem 20


def test_discrete_with_lcm_grid_is_lossless():
    topo = build("genkautz(4, 64)")
    frac = bfb_allgather(topo)
    assert bfb_allgather(topo, chunks=frac.schedule.grid).tau == frac.tau


def test_receiver_types_group_sources_by_eligible_arcs():
    topo = build("bipartite(2)")
    ctx = BfbContext.create(topo, shortcut=False)
    dcol, dw = ctx.receiver_distances(np.array([0]))
    _, groups = receiver_types(dcol[:, 0], dw[:, 0, :], topo.degree)
    assert [(g.t, g.masks, g.counts) for g in groups] == [(1, [1, 2], [1, 1]), (2, [3], [1])]


def test_schedule_size_limit_is_a_clear_error():
    with pytest.raises(ScheduleTooLarge, match="at most 4096 nodes"):
        bfb_allgather(build("hypercube(13)"))


def test_measured_tau_of_bfb_schedule_matches_eq_2():
    topo = build("debruijn(4, 4)")
    r = bfb_allgather(topo)
    per_step = [max(r.u(u, t) for u in range(topo.nodes)) for t in range(1, topo.diameter + 1)]
    assert r.tau == F(topo.degree, topo.nodes) * sum(per_step)
    assert measured_tau(r.schedule, topo.degree) == r.tau


@pytest.mark.parametrize("expr", ["genkautz(4, 64)", "debruijn(3, 3)", "line(bipartite(3))", "genkautz(13, 60)",
                                  "genkautz(16, 120)", "kautz(2, 3)", "torus(4, 6)", "product(ring(3), ring(5, 2))"])
def test_tau_only_evaluator_matches_the_full_solve(expr):
    """The finder's evaluator (no schedule) gives the same (D, tau) by both U* methods."""
    from services.synthesis.bfb.price import bfb_tau

    topo = build(expr)
    full = bfb_allgather(topo, workers=1)
    for method in ("zeta", "cut"):
        if method == "zeta" and topo.degree > 12:
            continue
        assert bfb_tau(topo, method=method) == (topo.diameter, full.tau), method
