"""All-to-all schedules from the time-stepped LP: model-checked on a spread of topologies (Cayley graphs,
graphs with a smaller automorphism group, none at all, parallel arcs, random digraphs), measured against the
MCF bound, and the model checker's all-to-all semantics on hand-made and broken schedules."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from services.synthesis.evaluate.alltoall import alltoall_throughput
from services.synthesis.evaluate.alltoall_schedule import alltoall_schedule, hop_bounded_throughput
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build
from services.synthesis.topology.graph import TopologyError


def check(s) -> None:
    """Verified, measured from the schedule, never below the MCF bound, within 10 % of it (LP exact)."""
    assert s.report.ok and verify(s.schedule, s.topology).ok
    assert s.schedule.collective is Collective.ALLTOALL and s.schedule.grid == s.topology.nodes * s.chunks
    assert float(s.tau) >= s.mcf_tau * (1 - 1e-9)            # no schedule beats the MCF bound
    assert float(s.tau) >= s.lp_tau * (1 - 1e-9)             # rounding to chunks only adds
    assert s.steps <= s.lp_steps
    if s.mcf.exact:
        assert float(s.tau) <= 1.10 * s.mcf_tau


SPREAD = ["torus(4, 4)", "hypercube(4)", "bipartite(4)", "circulant(16, 3, 4)", "complete(5)", "biring(7)",
          "ring(5, 2)", "debruijn(2, 3)", "kautz(2, 3)", "genkautz(3, 10)", "line(bipartite(3))",
          "degree(genkautz(2, 6), 2)", "product(biring(4), ring(3))", "twisted_torus(6, 3)",
          "distreg(octahedron)"]


@pytest.mark.parametrize("expr", SPREAD)
def test_schedules_pass_the_model_checker_near_the_mcf_bound(expr):
    check(alltoall_schedule(build(expr)))


@pytest.mark.parametrize("expr", ["torus(4, 4)", "hypercube(4)", "bipartite(4)", "circulant(16, 3, 4)",
                                  "debruijn(2, 3)", "line(bipartite(4))"])
def test_reaches_the_mcf_bound_exactly(expr):
    # these LP optima have small common denominators: the chunking is exact and tau = d / (N f)
    s = alltoall_schedule(build(expr))
    check(s)
    assert float(s.tau) == pytest.approx(s.mcf_tau, rel=1e-9)
    assert float(s.tau) == pytest.approx(s.lp_tau, rel=1e-9)


def test_complete_graph_is_one_step_of_direct_sends():
    # K_5: every block goes straight to its destination: one step, one block (D/5) per link, tau = 4/5
    s = alltoall_schedule(build("complete(5)"))
    assert (s.steps, s.tau, s.report.transfers) == (1, Fraction(4, 5), 20)
    link = LinkModel.from_units(10, 100)
    assert s.time_s(link, 1 << 20) == pytest.approx(10e-6 + 0.8 * (1 << 20) / link.node_bandwidth_Bps)
    assert s.mcf_time_s(link, 1 << 20) == pytest.approx((1 << 20) / 5 / (link.node_bandwidth_Bps / 4))


def test_de_bruijn_needs_one_step_beyond_the_diameter():
    # reference B.9: DBJ(8) with T = 3 = D costs sum U = 12 blocks (13.3 % above 1/f = 9); T = 4 reaches 9
    topo = build("debruijn(2, 3)")
    at_diameter = alltoall_schedule(topo, steps=3)
    assert at_diameter.lp_tau == pytest.approx(2 / 8 * 12)
    auto = alltoall_schedule(topo)
    assert auto.lp_steps == 4 and auto.lp_tau == pytest.approx(2 / 8 * 9)


def test_symmetry_reduces_the_lp():
    assert alltoall_schedule(build("torus(4, 4)")).representatives == 1            # Cayley graph
    assert alltoall_schedule(build("debruijn(2, 3)")).representatives == 4         # digit rotation, |H| = 2
    assert alltoall_schedule(build("distreg(octahedron)")).representatives == 6    # no group known


def random_topology(n: int, d: int, seed: int):
    """`_random_digraph` built; hypothesis discards the draws that are not strongly connected."""
    try:
        return build(_random_digraph(n, d, seed))
    except (TopologyError, ValueError):
        assume(False)


def _random_digraph(n: int, d: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    arcs = [f"{u}>{int(p[u])}" for _ in range(d) for p in [rng.permutation(n)] for u in range(n)]
    return f"edges({n}, {', '.join(arcs)})"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(5, 11), d=st.integers(2, 3), seed=st.integers(0, 10_000))
def test_random_regular_digraphs(n, d, seed):
    # unions of d random permutations (self-loops and parallel arcs allowed): no symmetry, one LP per source
    check(alltoall_schedule(random_topology(n, d, seed)))


def test_hop_bounded_throughput_matches_reference_values():
    # reference B.11: path LP on DBJ(8) gives 1/9 at L = 3, 4, 5; K_{4,4} gives 0.4 at L = 2
    dbj = build("debruijn(2, 3)")
    assert [round(1 / hop_bounded_throughput(dbj, L), 9) for L in (3, 4, 5)] == [9.0, 9.0, 9.0]
    assert hop_bounded_throughput(build("bipartite(4)"), 2) == pytest.approx(0.4)
    # monotone in L and bounded by LP (3); the ring needs L = N - 1 hops
    ring = build("biring(6)")
    f = [hop_bounded_throughput(ring, L) for L in (3, 4, 5)]
    assert f[0] <= f[1] + 1e-12 <= f[2] + 2e-12
    assert f[-1] <= alltoall_throughput(ring).upper * (1 + 1e-9)


def test_bad_inputs():
    topo = build("torus(4, 4)")
    with pytest.raises(ValueError, match="at least 4 steps"):
        alltoall_schedule(topo, steps=3)
    with pytest.raises(ValueError, match="chunks"):
        alltoall_schedule(topo, chunks=0)
    with pytest.raises(ValueError, match="limited to"):
        alltoall_schedule(build("torus(40, 40)"))
    with pytest.raises(ValueError, match="variables"):
        alltoall_schedule(build("genkautz(4, 1000)"))               # 500 source orbits: millions of variables


# ----- the model checker's all-to-all semantics -------------------------------------------------------------

def _direct(n: int = 3) -> list:
    """K_3 all-to-all by direct sends: node i sends block j of its buffer to j in step 1 (grid = N)."""
    return [((i, (Fraction(j, n), Fraction(j + 1, n))), (i, j), 1) for i in range(n) for j in range(n) if i != j]


def test_checker_accepts_direct_sends_and_measures_tau():
    s = Schedule.from_tuples(Collective.ALLTOALL, 3, _direct())
    r = verify(s, build("complete(3)"))
    assert r.ok and r.steps == 1 and r.tau == Fraction(2, 3)        # one block (D/3) per link of B/2


def test_checker_rejects_a_missing_block():
    s = Schedule.from_tuples(Collective.ALLTOALL, 3, _direct()[1:])
    r = verify(s, build("complete(3)"))
    assert not r.ok and r.violation.kind == "incomplete"
    assert r.violation.receiver == 1 and r.violation.source == 0


def test_checker_rejects_forwarding_before_receiving():
    # on the ring 0 -> 1 -> 2 -> 0, node 1 forwards 0's block 2 in the same step it receives it
    rows = [((0, (Fraction(2, 3), Fraction(1))), (0, 1), 1), ((0, (Fraction(2, 3), Fraction(1))), (1, 2), 1)]
    s = Schedule.from_tuples(Collective.ALLTOALL, 3, rows)
    r = verify(s, build("ring(3)"))
    assert not r.ok and r.violation.kind == "not_held" and r.violation.sender == 1


def test_checker_requires_a_grid_of_whole_blocks():
    rows = [((0, (Fraction(1, 2), Fraction(1))), (0, 1), 1)]
    r = verify(Schedule.from_tuples(Collective.ALLTOALL, 3, rows), build("complete(3)"))
    assert not r.ok and r.violation.kind == "structure" and "multiple of N" in r.violation.message


def test_delivering_the_wrong_block_is_incomplete():
    # node 0's block for 2 sent to 1 instead of its block for 1: 1 holds data, but not its own block
    rows = [r for r in _direct() if r[0][0] != 0] + [((0, (Fraction(2, 3), Fraction(1))), (0, 1), 1),
                                                     ((0, (Fraction(2, 3), Fraction(1))), (0, 2), 1)]
    r = verify(Schedule.from_tuples(Collective.ALLTOALL, 3, rows), build("complete(3)"))
    assert not r.ok and r.violation.kind == "incomplete" and r.violation.receiver == 1


def test_all_to_all_schedules_do_not_reverse():
    s = Schedule.from_tuples(Collective.ALLTOALL, 3, _direct())
    with pytest.raises(ValueError):
        s.reverse()
