"""Reservations (sharding), per-panel configs and diffs (services.fabric.state / crossconnect)."""
from __future__ import annotations

import json

import pytest

from services.fabric import (AssignmentError, ConfigError, FabricState, HostBusyError, ReservationError,
                             config_digest, diff_connections, panel_configs, planes_fabric, shared_panel_fabric)
from services.synthesis.topology.catalog import build

from tests.fabric.test_fabric import verify


@pytest.fixture
def state():
    return FabricState(planes_fabric(24, 4))


def _pairs(conns):
    return sorted((c["ingress"], c["egress"]) for c in conns)


# ----- reservations --------------------------------------------------------------------------------
def test_two_plans_cannot_share_a_host(state):
    state.reserve("A", ["h00", "h01", "h02", "h03"])
    with pytest.raises(HostBusyError, match=r"plan 'B' cannot reserve host 'h02': it is held by plan 'A'") as e:
        state.reserve("B", ["h05", "h02", "h03"])
    assert e.value.conflicts == {"h02": "A", "h03": "A"} and isinstance(e.value, ValueError)
    assert "B" not in state.reservations and state.holder("h05") is None     # all or nothing


def test_first_free_hosts_and_release_restores_ports(state):
    ta = build("torus(4, 4)")
    a = state.bind("A", ta)                                                  # first 16 free hosts
    assert list(a.hosts) == [f"h{i:02d}" for i in range(16)]
    verify(state.fabric, a, ta)
    assert state.free_hosts() == [f"h{i:02d}" for i in range(16, 24)]
    held = state.held_ports("A")
    assert held["plane0"]["ingress"] == list(range(16)) == held["plane3"]["egress"]
    assert state.port_holder("plane2", 5) == {"ingress": "A", "egress": "A"}
    with pytest.raises(ReservationError, match="asks for 16 hosts but fabric 'fabric' has only 8 free"):
        state.bind("B", build("circulant(16, 1, 2)"))
    b = state.bind("B", build("circulant(8, 1, 2)"))
    assert list(b.hosts) == [f"h{i:02d}" for i in range(16, 24)]
    with pytest.raises(HostBusyError, match="host 'h03'.*plan 'A'"):
        state.reserve("C", ["h03"])
    state.release("A")
    assert state.port_holder("plane2", 5) == {"ingress": None, "egress": None}
    assert state.free_hosts() == [f"h{i:02d}" for i in range(16)]
    tc = build("genkautz(4, 16)")
    c = state.bind("C", tc)                                                  # a third plan takes them
    assert list(c.hosts) == [f"h{i:02d}" for i in range(16)]
    verify(state.fabric, c, tc)
    assert state.held_ports("C") == held
    with pytest.raises(ReservationError, match="plan 'A' holds no hosts"):
        state.release("A")


def test_reservation_input_errors(state):
    with pytest.raises(ReservationError, match="no host 'zz'"):
        state.reserve("A", ["h00", "zz"])
    with pytest.raises(ReservationError, match="'h01' is listed twice"):
        state.reserve("A", ["h01", "h01"])
    with pytest.raises(ReservationError, match="either"):
        state.reserve("A")
    with pytest.raises(ReservationError, match="positive"):
        state.reserve("A", count=0)
    state.reserve("A", count=2)
    with pytest.raises(ReservationError, match="already holds"):
        state.reserve("A", count=2)


def test_bind_rolls_back_when_assignment_fails(state):
    with pytest.raises(AssignmentError, match="degree 5"):
        state.bind("A", build("complete(6)"))                                # d = 5 > 4 ports
    assert state.reservations == {} and len(state.free_hosts()) == 24


def test_explicit_hosts_and_node_mapping(state):
    t = build("ring(6, 2)")
    state.reserve("A", ["h10", "h03", "h07", "h20", "h01", "h15"])
    a = state.assign("A", t)
    assert list(a.hosts) == ["h10", "h03", "h07", "h20", "h01", "h15"]
    verify(state.fabric, a, t)
    b = state.assign("A", t, node_hosts=sorted(a.hosts))
    assert list(b.hosts) == sorted(a.hosts) and state.assignments["A"] is b
    with pytest.raises(AssignmentError, match="reordering"):
        state.assign("A", t, node_hosts=["h00", "h03", "h07", "h20", "h01", "h15"])


def test_state_json_roundtrip(state):
    state.bind("A", build("debruijn(2, 3)"), self_loops="dark")
    state.bind("B", build("line(bipartite(2))"))
    state.reserve("C", count=3)
    blob = json.dumps(state.to_dict())
    st2 = FabricState.from_dict(json.loads(blob))
    assert st2.to_dict() == state.to_dict()
    assert st2.panel_configs() == state.panel_configs()
    bad = json.loads(blob)
    bad["reservations"][1]["hosts"][0] = bad["reservations"][0]["hosts"][0]
    with pytest.raises(HostBusyError):
        FabricState.from_dict(bad)


# ----- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [planes_fabric, shared_panel_fabric])
def test_panel_configs_union_of_plans(make):
    st = FabricState(make(20, 4))
    a = st.bind("A", build("circulant(12)"))
    b = st.bind("B", build("hypercube(3)"))
    cfgs = st.panel_configs()
    assert list(cfgs) == [p.id for p in st.fabric.panels]
    for pid, cfg in cfgs.items():
        assert cfg["panel"] == pid and cfg["kind"] == "patch_panel"
        assert [c["ingress"] for c in cfg["cross_connects"]] == sorted(c["ingress"] for c in cfg["cross_connects"])
        assert len({c["egress"] for c in cfg["cross_connects"]}) == len(cfg["cross_connects"])
        want = a.cross_connects().get(pid, []) + b.cross_connects().get(pid, [])
        assert _pairs(cfg["cross_connects"]) == _pairs(want)
        assert {c["plan_id"] for c in cfg["cross_connects"]} <= {"A", "B"}
        assert cfg["digest"] == config_digest(want)
        # every connection joins ports of this panel held by the same plan's hosts
        for c in cfg["cross_connects"]:
            assert st.port_holder(pid, c["ingress"])["ingress"] == c["plan_id"]
            assert st.port_holder(pid, c["egress"])["egress"] == c["plan_id"]
    assert st.panels_of("A") == sorted(a.cross_connects())
    st.release("B")
    assert all(c["plan_id"] == "A" for cfg in st.panel_configs().values() for c in cfg["cross_connects"])
    # overlapping assignments (impossible through FabricState) are refused when merged directly
    with pytest.raises(ConfigError, match="connected twice"):
        panel_configs(st.fabric, [a, a.to_dict()])


def test_digest_depends_only_on_physical_pairs():
    assert config_digest([(1, 2), (0, 5)]) == config_digest([{"ingress": 0, "egress": 5, "plan_id": "x"},
                                                              {"ingress": 1, "egress": 2}])
    assert config_digest([(1, 2)]) != config_digest([(2, 1)])


# ----- diffs ---------------------------------------------------------------------------------------
def test_diff_connections_basic():
    current = [(0, 1), (1, 2), (2, 3), (7, 7)]
    desired = [{"ingress": 0, "egress": 1, "arc": 0}, {"ingress": 1, "egress": 3, "arc": 1},
               {"ingress": 4, "egress": 2, "arc": 2}]
    d = diff_connections(current, desired, panel="pp", ports=8)
    assert _pairs(d.unchanged) == [(0, 1)] and d.unchanged[0]["arc"] == 0
    assert _pairs(d.remove) == [(1, 2), (2, 3), (7, 7)]
    assert _pairs(d.add) == [(1, 3), (4, 2)] and [c["arc"] for c in d.add] == [1, 2]
    assert d.changes == 5 and d.kept == []
    # (7, 7) touches no desired port, so an idle predicate may keep it; (1, 2) and (2, 3) hold ports
    # the desired state needs (ingress 1, egress 2, egress 3), so they go whatever the predicate says
    d = diff_connections(current, desired, idle=lambda a, b: True)
    assert _pairs(d.kept) == [(7, 7)] and _pairs(d.remove) == [(1, 2), (2, 3)]
    assert d.to_dict()["changes"] == 4
    # applying the diff to the current state gives the desired state
    after = (set(current) - set(_pairs(d.remove))) | set(_pairs(d.add))
    assert after - set(_pairs(d.kept)) == set(_pairs(desired))
    assert diff_connections(desired, desired).changes == 0


def test_diff_rejects_impossible_states():
    with pytest.raises(ConfigError, match="panel 'pp' current state: ingress 0 is connected twice"):
        diff_connections([(0, 1), (0, 2)], [], panel="pp")
    with pytest.raises(ConfigError, match="egress 1 is connected twice"):
        diff_connections([], [(0, 1), (2, 1)])
    with pytest.raises(ConfigError, match="outside ports 0..3"):
        diff_connections([(0, 4)], [], ports=4)
    with pytest.raises(ConfigError, match="ingress"):
        diff_connections([{"in": 0}], [])


def test_replan_diff_on_a_plane():
    """Plan A applied on plane0, then A released and B bound on the same hosts: the diff keeps shared
    connections, removes A's others and adds B's."""
    st = FabricState(planes_fabric(16, 4))
    st.bind("A", build("torus(4, 4)"))
    applied = {p: _pairs(c["cross_connects"]) for p, c in st.panel_configs().items()}
    assert st.diff("plane0", applied["plane0"]).changes == 0
    st.release("A")
    st.bind("B", build("circulant(16, 1, 4)"))                       # shares the +-1 and +-4 neighbours
    for pid in applied:
        want = _pairs(st.panel_config(pid)["cross_connects"])
        d = st.diff(pid, applied[pid])
        assert set(_pairs(d.unchanged)) == set(applied[pid]) & set(want)
        assert set(_pairs(d.remove)) == set(applied[pid]) - set(want)
        assert set(_pairs(d.add)) == set(want) - set(applied[pid])
        assert d.kept == []


def test_diff_idle_ports_kept_only_between_free_hosts():
    st = FabricState(planes_fabric(12, 2))
    st.bind("A", build("ring(6, 2)"))                                 # hosts h00..h05, panel ports 0..5
    stale = [(6, 7), (7, 8), (8, 2), (3, 9)]                          # old plan's leftovers; 2 and 3 are A's
    current = _pairs(st.panel_config("plane0")["cross_connects"]) + [(6, 7), (7, 8)]
    current = [p for p in current if p[0] != 3] + [(3, 9)]            # A's ingress 3 stale-wired to h09
    current = [p for p in current if p[1] != 2] + [(8, 2)]            # h08 stale-wired into A's egress 2
    exact = st.diff("plane0", current)
    assert set(_pairs(exact.remove)) == set(stale) and exact.kept == []
    lazy = st.diff("plane0", current, prune_idle=False)
    assert _pairs(lazy.kept) == [(6, 7), (7, 8)]                       # both ends on free hosts
    assert _pairs(lazy.remove) == [(3, 9), (8, 2)]                     # would leak into plan A
    assert _pairs(lazy.add) == _pairs(exact.add)
    assert set(_pairs(lazy.add)) == {p for p in _pairs(st.panel_config("plane0")["cross_connects"])
                                     if p[0] == 3 or p[1] == 2}
    st.release("A")
    assert _pairs(st.diff("plane0", current, prune_idle=False).kept) == sorted(current)
    assert _pairs(st.diff("plane0", current).remove) == sorted(current)
