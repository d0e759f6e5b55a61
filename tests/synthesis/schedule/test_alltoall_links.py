"""An all-to-all priced on per-link costs: a grid unit is D / grid bytes (the grid divides the whole buffer), not
M / (N grid) (ir; cost.grid_unit_fraction), against hand computations; `fabricplan schedule EXPR --collective
alltoall --links FILE` reports the dependency-driven time of its schedule on those links."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from services.cli import main
from services.synthesis.schedule.cost import LinkModel, heterogeneous_time
from services.synthesis.schedule.dependency import critical_path, dependency_time
from services.synthesis.schedule.envelope import curve
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.schedule.links import LinkCosts
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build


def _ring3_alltoall() -> Schedule:
    """ring(3) 0->1->2->0, buffers of three blocks (grid 3): step 1 every node u sends blocks u+1 and u+2 of its
    own buffer to u+1; step 2 node u+1 forwards block u+2 to u+2."""
    rows = []
    for u in range(3):
        for j in (1, 2):
            b = (u + j) % 3
            rows.append(((u, (Fraction(b, 3), Fraction(b + 1, 3))), (u, (u + 1) % 3), 1))
        b = (u + 2) % 3
        rows.append(((u, (Fraction(b, 3), Fraction(b + 1, 3))), ((u + 1) % 3, (u + 2) % 3), 2))
    return Schedule.from_tuples(Collective.ALLTOALL, 3, rows)


def test_ring3_alltoall_by_hand():
    """D = 3 MB per node, a block 1 MB; alpha 10 us; link 0->1 at 1 GB/s (1 ms per MB), the others 2 GB/s.
    Barrier: step 1 the slow link carries 2 MB (10 us + 2 ms), step 2 1 MB (10 us + 1 ms): 3020 us.
    Dependency: 0->1 runs its two groups back to back (its step-2 block, source 2's block 1, arrived at node 0
    over 2->0 at 1010 us, before the link is free at 2010 us): 3020 us; 1->2's step-2 group waits for source 0's
    block 2 (2010 us) and ends at 2520 us; 2->0's at 1010 + 510 = 1520 us. The bug priced a unit at D/(N grid):
    step 1 would cost 10 + 2000/3 us."""
    g = build("ring(3)")
    s = _ring3_alltoall()
    assert verify(s, g).ok
    bw = np.full(3, 2e9)
    bw[g.arc_index([0], [1], [0])[0]] = 1e9
    costs = LinkCosts(g, np.full(3, 10e-6), bw)
    d = 3e6
    assert heterogeneous_time(s, g, costs.alpha_s, bw, d) == pytest.approx(3020e-6)
    assert costs.time(s, d) == pytest.approx(3020e-6)
    assert float(curve(s, costs)(d)) == pytest.approx(3020e-6)
    p = critical_path(s, costs, d)
    assert p.seconds == pytest.approx(3020e-6)
    assert (p.latency_s, p.per_byte_s * d) == pytest.approx((20e-6, 3000e-6))
    # a faster slow link (1.5 GB/s): 0->1's groups take 10 + 1333.3 and 10 + 666.7 us; 1->2's step-2 group waits
    # for source 0's block 2 (1343.3 us) and ends at 1343.3 + 510 = 1853.3 us; 0->1 ends at 2020 us; the barrier
    # pays max(1343.3, 1010) + max(676.7, 510) = 2020 us as well
    bw[g.arc_index([0], [1], [0])[0]] = 1.5e9
    costs = LinkCosts(g, np.full(3, 10e-6), bw)
    assert dependency_time(s, costs, d) == pytest.approx(2020e-6)


def test_torus_alltoall_on_uniform_links_by_hand(tmp_path, capsys):
    """torus(4, 4): the all-to-all LP's schedule has 4 steps and tau = 2 (T_B = 2 D/B): at D = 1 MiB, alpha
    10 us, B = 100 Gbps: 4 * 10 + 2 * 2^20 / 12.5e9 s = 207.77216 us, whether the links come from --alpha-us /
    --bandwidth-gbps or from a --links file listing them (50.5 us with the bug)."""
    table = tmp_path / "links.json"
    table.write_text(json.dumps({"default": {"alpha_us": 10, "bandwidth_gbps": 25}, "links": []}))
    for extra in ([], ["--links", str(table)]):
        assert main(["schedule", "torus(4, 4)", "--collective", "alltoall", "--json", "--alpha-us", "10",
                     "--bandwidth-gbps", "100", *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        assert (out["steps"], out["tau_exact"]) == (4, "2")
        assert out["time_us"] == pytest.approx(207.77216, rel=1e-12)
        assert out["barrier_time_us"] == pytest.approx(207.77216, rel=1e-12)


def test_alltoall_links_cli_reports_the_dependency_time(tmp_path, capsys):
    """Two slow arcs on torus(4, 4): the CLI's time is the dependency-driven time of the schedule it wrote, on
    those links, and never above the step-synchronous price it reports beside it."""
    g = build("torus(4, 4)")
    table = tmp_path / "links.json"
    table.write_text(json.dumps({"default": {"alpha_us": 10, "bandwidth_gbps": 25},
                                 "links": [{"arc": "0>1", "bandwidth_gbps": 5}, {"arc": "5>9", "bandwidth_gbps": 5}]}))
    out_file = tmp_path / "a2a.npz"
    assert main(["schedule", "torus(4, 4)", "--collective", "alltoall", "--json", "--links", str(table),
                 "--size", str(1 << 24), "-o", str(out_file)]) == 0
    out = json.loads(capsys.readouterr().out)
    s = Schedule.from_bytes(out_file.read_bytes())
    bw = np.full(g.arcs, 25e9 / 8)
    bw[g.arc_index([0, 5], [1, 9], [0, 0])] = 5e9 / 8
    costs = LinkCosts(g, np.full(g.arcs, 10e-6), bw)
    assert out["time_us"] == pytest.approx(dependency_time(s, costs, 1 << 24) * 1e6, rel=1e-12)
    assert out["barrier_time_us"] == pytest.approx(costs.time(s, 1 << 24) * 1e6, rel=1e-12)
    assert out["time_us"] <= out["barrier_time_us"] * (1 + 1e-12)
    # bandwidth-bound at 16 MiB: the slow arcs carry D/grid-unit loads, so the time exceeds the uniform one
    uniform = LinkCosts.uniform(g, LinkModel.from_units(10, 100))
    assert out["time_us"] > dependency_time(s, uniform, 1 << 24) * 1e6


def test_alltoall_links_file_errors_name_the_field(tmp_path, capsys):
    table = tmp_path / "links.json"
    table.write_text(json.dumps({"links": [{"arc": "0>7", "bandwidth_gbps": 5}]}))
    assert main(["schedule", "torus(4, 4)", "--collective", "alltoall", "--links", str(table)]) == 2
    assert "links.0.arc" in capsys.readouterr().err
