"""The live-fabric library (issue 14): device profiles, the capital cost estimator, re-patching around failed
ports, active and look-ahead planes, and link loads on degraded topologies."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from services.fabric import (AssignmentError, Fabric, FabricError, ReservationError, assign_ports, planes_fabric,
                             shared_panel_fabric)
from services.fabric.cost import FIBER_USD_PER_M, PRICE_TABLE, SWITCH_1X2_USD, fabric_cost, price_row
from services.fabric.devices import PROFILES, ProfileError, profile_for
from services.fabric.planes import ACTIVE, LOOKAHEAD, PlanesState
from services.fabric.repair import RepairError, arcs_on_faults, repatch
from services.synthesis.bfb.lp import bfb_allgather
from services.synthesis.schedule.cost import link_loads, measured_tau
from services.synthesis.topology.catalog import build

from tests.fabric.test_fabric import verify


# ----- device profiles ----------------------------------------------------------------------------------
def test_profiles_are_topoopt_table_1():
    pp, ocs = PROFILES["patch_panel"], PROFILES["ocs"]
    assert (pp.max_ports, pp.insertion_loss_db, pp.cost_per_port_usd) == (1008, 0.5, 100.0)
    assert (ocs.max_ports, ocs.reconfiguration_s, ocs.insertion_loss_max_db, ocs.cost_per_port_usd) == (384, 0.01, 2.7, 520.0)
    assert ocs.reconfiguration_time_s(1) == ocs.reconfiguration_time_s(10_000) == 0.01     # every mirror at once
    assert pp.reconfiguration_time_s(0) == 0.0
    assert pp.reconfiguration_time_s(48) == 300.0 and pp.reconfiguration_time_s(97) == 900.0   # robot batches
    assert pp.devices_for(2016) == 2 and ocs.devices_for(385) == 2
    assert pp.reconfiguration_time_s(10) / ocs.reconfiguration_time_s(10) >= 1e4     # "four orders of magnitude"


def test_profile_overrides_are_checked():
    p = profile_for("patch_panel", {"robot_batch_size": 4, "reconfiguration_s": 30, "model": "lab panel"})
    assert p.reconfiguration_time_s(9) == 90.0 and p.model == "lab panel" and p.max_ports == 1008
    for bad in ({"robot_batch_size": 0}, {"reconfiguration_s": -1}, {"cost_per_port_usd": math.inf},
                {"warp": 1}, {"max_ports": 1.5}, {"model": ""}):
        with pytest.raises(ProfileError):
            profile_for("patch_panel", bad)
    with pytest.raises(ProfileError, match="OCS"):
        profile_for("ocs", {"robot_batch_size": 8})
    with pytest.raises(FabricError, match="profile.warp"):        # a fabric document with a bad override
        Fabric.from_dict({**planes_fabric(2, 1).to_dict(), "panels": [{"id": "plane0", "kind": "patch_panel",
                                                                         "ports": 2, "profile": {"warp": 1}}]})


# ----- cost -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gbps", [10, 25, 40, 100, 200])
def test_cost_is_topoopt_app_g_formula(gbps):
    """TopoOpt App. G: n d NICs and transceivers, 2 n d patch panel ports (look-ahead), n d 1x2 switches and
    the fibers: n d (NIC + xcvr + 2 * 100 + 25) + fibers, with two fibers per port and side."""
    n, d = 128, 4
    c = fabric_cost(planes_fabric(n, d, lookahead=True), gbps, fiber_m=250)
    xcvr, nic = PRICE_TABLE[gbps]
    fibers = 2 * 2 * n * d * 250 * FIBER_USD_PER_M
    assert c.total_usd == pytest.approx(n * d * (nic + xcvr + 2 * 100 + SWITCH_1X2_USD) + fibers)
    ocs = fabric_cost(planes_fabric(n, d, kind="ocs"), gbps, fiber_m=0)          # d OCSs, no look-ahead
    assert ocs.total_usd == pytest.approx(n * d * (nic + xcvr + 520))


def test_cost_of_a_plan_share_and_lanes():
    fab = planes_fabric(16, 4)
    whole, part = fabric_cost(fab, 25), fabric_cost(fab, 25, hosts=[f"h{i:02d}" for i in range(4)])
    assert part.total_usd * 4 == pytest.approx(whole.total_usd)       # uniform hosts: a quarter each
    spare = fabric_cost(planes_fabric(16, 4, panel_ports=32), 25)      # spare panel ports are the fabric's
    assert spare.total_usd - whole.total_usd == pytest.approx(4 * 16 * 100)
    assert price_row(400) == (100, 4) and price_row(1) == (10, 1)
    big = {i["item"]: i["count"] for i in fabric_cost(fab, 400).items}
    assert big["transceivers"] == 4 * 64 and big["patch_panel ports"] == 64     # optics stay one per port
    with pytest.raises(FabricError):
        fabric_cost(fab, float("nan"))


# ----- repair -----------------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), faults=st.integers(1, 3), spare=st.integers(1, 2))
def test_repatch_moves_only_faulty_arcs_onto_healthy_spares(seed, faults, spare):
    """Random circulants on one OCS with spare ports per host: the arcs on faulty ports move, every other arc
    stays, no arc uses a faulty port, the assignment passes the independent check."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 14))
    offsets = [1, int(rng.integers(2, n))]          # 1: strongly connected
    topo = build(f"dcirculant({n}, {offsets[0]}, {offsets[1]})")
    fab = shared_panel_fabric(n, 2 + spare, kind="ocs")
    a = assign_ports(fab, [h.id for h in fab.hosts], topo)
    bad = set()
    for arc in rng.choice(a.arcs, size=faults, replace=False).tolist():
        bad.add(("panel0", "ingress", int(a.ingress[arc])))
        if rng.random() < 0.5:
            bad.add(("panel0", "egress", int(a.egress[arc])))
    on_faults = set(arcs_on_faults(a, bad).tolist())
    try:
        r = repatch(fab, a, bad)
    except RepairError as exc:          # two faulty arcs out of one host with a single spare port
        assert spare == 1 and "spare" in str(exc)
        return
    verify(fab, r.assignment, topo)
    assert {m["arc"] for m in r.moves} == on_faults
    assert arcs_on_faults(r.assignment, bad).size == 0
    same = [x for x in range(a.arcs) if x not in on_faults]
    assert (r.assignment.ingress[same] == a.ingress[same]).all() and (r.assignment.egress[same] == a.egress[same]).all()
    assert r.panels == ["panel0"]


def test_repatch_without_spare_ports_says_why():
    fab = planes_fabric(8, 4)                                  # d = ports per host: nothing spare
    a = assign_ports(fab, [h.id for h in fab.hosts], build("circulant(8, 1, 2)"))
    with pytest.raises(RepairError, match=r"arc \d+>\d+ .* cannot be re-patched: no panel has a spare tx port"):
        repatch(fab, a, [(a.panel[3], "ingress", int(a.ingress[3]))])
    assert repatch(fab, a, []).moves == []
    assert isinstance(RepairError("x"), AssignmentError)


# ----- planes -----------------------------------------------------------------------------------------
def test_lookahead_fabric_has_two_sides():
    fab = planes_fabric(4, 2, lookahead=True)
    assert fab.lookahead and [p.id for p in fab.panels] == ["plane0", "plane1", "plane0-alt", "plane1-alt"]
    assert fab.side(1).hosts[2].ports[1].tx.panel == "plane1-alt" and fab.side(0) is fab
    assert Fabric.from_dict(fab.to_dict()).to_dict() == fab.to_dict()
    with pytest.raises(FabricError, match="no look-ahead"):
        planes_fabric(4, 2).side(1)
    doc = fab.to_dict()
    del doc["hosts"][0]["ports"][0]["alt"]
    with pytest.raises(FabricError, match="every host port"):
        Fabric.from_dict(doc)
    doc = fab.to_dict()
    doc["hosts"][0]["ports"][0]["alt"]["tx"] = {"panel": "plane0", "port": 1}     # host 1's side-0 ingress
    with pytest.raises(FabricError, match="cabled twice"):
        Fabric.from_dict(doc)
    shared = shared_panel_fabric(3, 2, lookahead=True)
    assert shared.panels[0].ports == 12 and shared.side(1).hosts[0].ports[0].tx.port == 6


def test_planes_state_keeps_the_two_jobs_apart():
    fab = planes_fabric(8, 2, lookahead=True)
    st_ = PlanesState(fab)
    topo = build("dcirculant(8, 1, 3)")
    a, side_a = st_.bind("A", topo)                              # the running job: active side 0
    b, side_b = st_.bind("B", topo, plane=LOOKAHEAD)             # the next one, on the same hosts
    assert (side_a, side_b) == (0, 1) and list(a.hosts) == list(b.hosts)
    assert set(a.panel) == {"plane0", "plane1"} and set(b.panel) == {"plane0-alt", "plane1-alt"}
    verify(fab.side(1), b, topo)
    cfg = st_.panel_config("plane0-alt")["cross_connects"]
    assert {c["plan_id"] for c in cfg} == {"B"} and {c["side"] for c in cfg} == {1}
    with pytest.raises(ReservationError):
        st_.bind("C", topo, plane=LOOKAHEAD)                      # the look-ahead planes are taken
    st_.release("A")
    st_.active_side.update({h: 1 for h in b.hosts})               # B activated: side 1 is now active
    assert st_.plane_of("h0", 1) == ACTIVE and st_.side_for("h0", LOOKAHEAD) == 0
    c, side_c = st_.bind("C", topo, plane=LOOKAHEAD)             # the job after: back on side 0
    assert side_c == 0 and set(c.panel) == {"plane0", "plane1"}
    with pytest.raises(ReservationError, match="different sides"):
        st_.active_side["h0"] = 0
        st_.bind("D", build("circulant(4, 1)"), ["h0", "h1", "h2", "h3"], plane=ACTIVE)
    with pytest.raises(ReservationError, match="no look-ahead planes"):
        PlanesState(planes_fabric(8, 2)).bind("E", topo, plane=LOOKAHEAD)


# ----- loads on a degraded topology ---------------------------------------------------------------------
@pytest.mark.parametrize("expr", ["remove(torus(4, 4), 0>1, 5>6)", "remove(genkautz(3, 12), 0>11)",
                                  "remove(circulant(10, 1, 3), 2>3)"])
def test_link_loads_on_irregular_topologies_give_back_tau(expr):
    g = build(expr)
    sched = bfb_allgather(g).schedule
    loads = link_loads(sched, g)
    assert loads.shape == (sched.steps, g.arcs)
    assert Fraction(g.degree * int(loads.max(axis=1).sum()), g.nodes * sched.grid) == measured_tau(sched, g.degree)
    assert int(loads.sum()) == int((sched.hi - sched.lo).sum())          # every transfer on exactly one arc
