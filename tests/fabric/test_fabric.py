"""Fabric model and port assignment: hosts/ports/panels, Konig split, cross-connects (services.fabric)."""
from __future__ import annotations

import itertools
import json
from collections import Counter

import numpy as np
import pytest

from services.fabric import (Assignment, AssignmentError, CablingError, Fabric, FabricError, Fiber, Host,
                             HostPort, Panel, assign_ports, konig_split, planes_fabric, shared_panel_fabric,
                             split_permutations)
from services.synthesis.topology.catalog import build

EXPRS = ["torus(4, 4)", "genkautz(4, 20)", "ring(6, 2)", "debruijn(2, 3)", "line(bipartite(2))", "circulant(12)"]
LAYOUTS = {"planes": planes_fabric, "shared": shared_panel_fabric}


def custom_fabric(layout, panels, *, kind="ocs", ports=64) -> Fabric:
    """layout[i][k] = (tx panel, rx panel) of host i port k; panel ports handed out in order."""
    nxt_in, nxt_out = Counter(), Counter()
    hosts = []
    for i, row in enumerate(layout):
        hp = []
        for tp, rp in row:
            hp.append(HostPort(Fiber(f"p{tp}", nxt_in[tp]), Fiber(f"p{rp}", nxt_out[rp])))
            nxt_in[tp] += 1
            nxt_out[rp] += 1
        hosts.append(Host(f"h{i}", tuple(hp)))
    return Fabric([Panel(f"p{p}", kind, ports) for p in range(panels)], hosts, "custom")


def arc_multiset(t) -> Counter:
    return Counter(zip(t.tails.tolist(), t.heads.tolist()))


def verify(fabric: Fabric, a: Assignment, t) -> None:
    """Independent check of an assignment against the fabric's Host/Fiber objects."""
    d = t.degree
    assert a.nodes == t.nodes and a.degree == d and a.arcs == t.arcs
    assert a.tails.tolist() == t.tails.tolist() and a.heads.tolist() == t.heads.tolist()
    assert a.lanes.tolist() == t.lanes.tolist()
    tx_used, rx_used, ing_used, eg_used = Counter(), Counter(), Counter(), Counter()
    for row in a.links():
        txf = fabric.host(row["tx_host"]).ports[row["tx_port"]].tx
        rxf = fabric.host(row["rx_host"]).ports[row["rx_port"]].rx
        assert row["tx_host"] == a.hosts[row["tail"]] and row["rx_host"] == a.hosts[row["head"]]
        # exactly one tx and one rx panel port per arc, both on the arc's panel
        assert (txf.panel, txf.port) == (row["panel"], row["ingress"])
        assert (rxf.panel, rxf.port) == (row["panel"], row["egress"])
        tx_used[row["tx_host"], row["tx_port"]] += 1
        rx_used[row["rx_host"], row["rx_port"]] += 1
        ing_used[row["panel"], row["ingress"]] += 1
        eg_used[row["panel"], row["egress"]] += 1
    # no panel port used twice (per side), each host port's tx and rx used once
    assert max(ing_used.values()) == max(eg_used.values()) == 1
    assert max(tx_used.values()) == max(rx_used.values()) == 1
    for h in a.hosts:
        assert sum(1 for (x, _) in tx_used if x == h) == d
        assert sum(1 for (x, _) in rx_used if x == h) == d
    # cross-connects: one per arc (self-loops only as loopbacks), on the panel both fibers land on
    cc = a.cross_connects()
    total = 0
    for panel, conns in cc.items():
        fabric.panel(panel)
        assert [c["ingress"] for c in conns] == sorted(c["ingress"] for c in conns)
        for c in conns:
            assert fabric.host(c["tx_host"]).ports[c["tx_port"]].tx == Fiber(panel, c["ingress"])
            assert fabric.host(c["rx_host"]).ports[c["rx_port"]].rx == Fiber(panel, c["egress"])
            assert c["loopback"] == (c["tail"] == c["head"]) == (c["tx_host"] == c["rx_host"])
            total += 1
    loops = int((t.tails == t.heads).sum())
    assert total == t.arcs - (loops if a.self_loops == "dark" else 0)


def verify_permutations(a: Assignment, t) -> None:
    perms = a.permutations()
    assert perms is not None and len(perms) == t.degree
    union = Counter()
    for p in perms:
        assert sorted(p) == list(range(t.nodes))          # a bijection on the nodes
        union.update(zip(range(t.nodes), p))
    assert union == arc_multiset(t)                       # d permutations partition the arc multiset


# ----- Konig split ---------------------------------------------------------------------------------
@pytest.mark.parametrize("expr", EXPRS + ["complete(5)", "hypercube(4)", "kautz(2, 3)", "dcirculant(9, 1, 2, 4)"])
def test_konig_split(expr):
    t = build(expr)
    slots = split_permutations(t)
    assert slots.shape == (t.degree, t.nodes)
    assert sorted(slots.ravel().tolist()) == list(range(t.arcs))        # every arc exactly once
    for s in slots:
        assert (t.tails[s] == np.arange(t.nodes)).all()                 # one arc out of every node
        assert sorted(t.heads[s].tolist()) == list(range(t.nodes))      # and into every node


def test_konig_split_multigraph_lanes():
    t = build("ring(6, 2)")                                             # every arc doubled
    slots = split_permutations(t)
    for u in range(6):
        assert sorted(t.lanes[slots[:, u]].tolist()) == [0, 1]          # both lanes used, once each


def test_konig_split_rejects_irregular():
    with pytest.raises(AssignmentError, match="regular"):
        konig_split(3, [0, 0, 1, 2], [1, 2, 2, 0])


# ----- assignment on the two standard layouts ------------------------------------------------------
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("expr", EXPRS)
def test_assignment_standard_layouts(expr, layout):
    t = build(expr)
    fabric = LAYOUTS[layout](t.nodes + 2, t.degree)                     # spare hosts on the fabric
    hosts = [h.id for h in fabric.hosts[1:t.nodes + 1]]                 # not starting at panel port 0
    a = assign_ports(fabric, hosts, t, plan_id="p")
    assert a.method == "konig"
    verify(fabric, a, t)
    verify_permutations(a, t)
    if layout == "planes":
        # permutation k on panel k: tx port k -> rx port k, panel port = host index
        assert list(a.slot_panels) == [f"plane{k}" for k in range(t.degree)]
        perms = a.permutations()
        for k, conns in enumerate(a.cross_connects()[f"plane{k}"] for k in range(t.degree)):
            assert all(c["tx_port"] == c["rx_port"] == k for c in conns)
            got = {c["ingress"]: c["egress"] for c in conns}
            want = {fabric.host_index[hosts[u]]: fabric.host_index[hosts[perms[k][u]]] for u in range(t.nodes)}
            assert got == want
    else:
        assert list(a.cross_connects()) == ["panel0"]


@pytest.mark.parametrize("expr", EXPRS)
def test_assignment_deterministic_and_json(expr):
    t = build(expr)
    fabric = planes_fabric(t.nodes, t.degree)
    hosts = [h.id for h in fabric.hosts]
    a, b = assign_ports(fabric, hosts, t, plan_id="x"), assign_ports(fabric, hosts, t, plan_id="x")
    assert a.to_dict() == b.to_dict()
    blob = json.dumps(a.to_dict())
    c = Assignment.from_dict(json.loads(blob))
    c.check(fabric)
    assert c.to_dict() == a.to_dict() and c.cross_connects() == a.cross_connects()
    assert json.loads(json.dumps(fabric.to_dict())) == Fabric.from_dict(fabric.to_dict()).to_dict()


def test_self_loops_loopback_and_dark():
    t = build("debruijn(2, 3)")                                          # self-loops at 0 and 7
    fabric = planes_fabric(8, 2)
    hosts = [h.id for h in fabric.hosts]
    loop = assign_ports(fabric, hosts, t)
    loops = [c for cs in loop.cross_connects().values() for c in cs if c["loopback"]]
    assert sorted(c["tail"] for c in loops) == [0, 7]
    for c in loops:                                                      # host's own tx -> own rx
        assert c["tx_host"] == c["rx_host"] and c["ingress"] == c["egress"] == fabric.host_index[c["tx_host"]]
    dark = assign_ports(fabric, hosts, t, self_loops="dark")
    verify(fabric, dark, t)                                              # ports still reserved
    assert sum(map(len, dark.cross_connects().values())) == t.arcs - 2
    with pytest.raises(AssignmentError, match="self_loops"):
        assign_ports(fabric, hosts, t, self_loops="unplug")


def test_node_to_host_mapping_is_respected():
    t = build("ring(6, 2)")
    fabric = shared_panel_fabric(6, 2)
    hosts = ["h5", "h3", "h1", "h0", "h2", "h4"]
    a = assign_ports(fabric, hosts, t)
    verify(fabric, a, t)
    assert {(c["tx_host"], c["rx_host"]) for cs in a.cross_connects().values() for c in cs} == \
        {(hosts[u], hosts[(u + 1) % 6]) for u in range(6)}


def test_fewer_topology_ports_than_host_ports():
    t = build("torus(4, 4)")
    fabric = planes_fabric(16, 6)
    a = assign_ports(fabric, [h.id for h in fabric.hosts], t)
    assert a.method == "konig" and a.panels_used() == ["plane0", "plane1", "plane2", "plane3"]
    assert set(a.tx_port.tolist()) == set(a.rx_port.tolist()) == {0, 1, 2, 3}
    with pytest.raises(AssignmentError, match="degree 4 but hosts .* only 2 ports"):
        assign_ports(planes_fabric(16, 2), [f"h{i:02d}" for i in range(16)], t)


# ----- general cablings ----------------------------------------------------------------------------
def test_crossed_uniform_cabling_uses_konig():
    """tx of port k on panel k, rx of port k on panel k+1: still uniform, so still d permutations."""
    t = build("genkautz(4, 20)")
    fabric = custom_fabric([[(k, (k + 1) % 4) for k in range(4)] for _ in range(20)], 4)
    a = assign_ports(fabric, [h.id for h in fabric.hosts], t)
    assert a.method == "konig"
    verify(fabric, a, t)
    verify_permutations(a, t)
    assert ((a.rx_port + 1) % 4 == a.tx_port).all()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("expr", EXPRS)
def test_mixed_cabling_uses_ilp(expr, seed):
    """Uneven cablings over three panels with a planted solution: take the Konig split, put every arc on
    a random panel and cable the tail's tx port s and the head's rx port s (s = the arc's permutation)
    there. tx and rx of one host port then often land on different panels; the solver must find a
    wiring (not necessarily the planted one)."""
    t = build(expr)
    rng = np.random.default_rng(seed)
    slots = split_permutations(t)
    layout = [[[None, None] for _ in range(t.degree)] for _ in range(t.nodes)]
    for s in range(t.degree):
        for u, arc in enumerate(slots[s].tolist()):
            p = int(rng.integers(3))
            layout[u][s][0] = p
            layout[int(t.heads[arc])][s][1] = p
    fabric = custom_fabric([[tuple(x) for x in row] for row in layout], 3)
    a = assign_ports(fabric, [h.id for h in fabric.hosts], t)
    assert a.method == "ilp" and a.permutations() is None
    verify(fabric, a, t)


def test_ilp_forced_on_planes_layout_and_json():
    t = build("circulant(12)")
    fabric = planes_fabric(12, 4)
    a = assign_ports(fabric, [h.id for h in fabric.hosts], t, method="ilp")
    assert a.method == "ilp"
    verify(fabric, a, t)
    assert a.tx_port.tolist() == a.rx_port.tolist()                     # planes: port k only meets port k
    assert Assignment.from_dict(json.loads(json.dumps(a.to_dict()))).to_dict() == a.to_dict()


def test_impossible_tx_and_rx_on_different_panels():
    t = build("torus(4, 4)")
    fabric = custom_fabric([[(0, 1)] * 4 for _ in range(16)], 2)
    with pytest.raises(AssignmentError, match=r"no panel holds both a tx fiber of 'h0'.*'p0'.*rx fiber of 'h1'.*'p1'"):
        assign_ports(fabric, [h.id for h in fabric.hosts], t)


def test_impossible_disjoint_plane_groups():
    """Hosts 0-7 on panels p0/p1, hosts 8-15 on p2/p3: a ring over all 16 cannot be wired."""
    t = build("ring(16, 2)")
    fabric = custom_fabric([[(0, 0), (1, 1)]] * 8 + [[(2, 2), (3, 3)]] * 8, 4)
    with pytest.raises(AssignmentError, match=r"arc 7->8 \(host 'h7' -> host 'h8'\): no panel"):
        assign_ports(fabric, [h.id for h in fabric.hosts], t)
    # the same fabric can take the ring on one group
    t8 = build("ring(8, 2)")
    verify(fabric, assign_ports(fabric, [f"h{i}" for i in range(8, 16)], t8), t8)


def test_impossible_host_port_shortage():
    """Panels balanced and every arc has a panel, but host 0 has one tx fiber on each panel while both
    its out-neighbours (0 and 1) receive only on p0."""
    t = build("debruijn(2, 2)")   # 0->0, 0->1, 1->2, 1->3, 2->0, 2->1, 3->2, 3->3
    layout = [[(0, 0), (1, 0)], [(0, 0), (1, 0)], [(0, 1), (1, 1)], [(0, 1), (1, 1)]]
    fabric = custom_fabric(layout, 2)
    with pytest.raises(AssignmentError, match=r"host 'h0' \(node 0\): its 2 out-arcs cannot get distinct tx ports"):
        assign_ports(fabric, [h.id for h in fabric.hosts], t)


def test_impossible_unbalanced_panel():
    t = build("complete(3)")
    fabric = custom_fabric([[(0, 0), (0, 1)], [(0, 1), (1, 0)], [(0, 0), (1, 1)]], 2)
    with pytest.raises(AssignmentError, match="panel 'p0' holds 4 tx fibers but 3 rx fibers"):
        assign_ports(fabric, [h.id for h in fabric.hosts], t)


def test_impossible_global_conflict_is_really_infeasible():
    """Every arc and every host is fine on its own, yet no panel choice works (checked by brute force)."""
    t = build("biring(4)")
    layout = [[(0, 0), (0, 1)], [(0, 1), (1, 0)], [(0, 0), (1, 1)], [(1, 1), (1, 0)]]
    fabric = custom_fabric(layout, 2)
    with pytest.raises(AssignmentError, match="integer program infeasible"):
        assign_ports(fabric, [h.id for h in fabric.hosts], t)
    tx = np.array([[sum(p[0] == q for p in row) for q in (0, 1)] for row in layout])
    rx = np.array([[sum(p[1] == q for p in row) for q in (0, 1)] for row in layout])
    for choice in itertools.product((0, 1), repeat=t.arcs):
        out, inn = np.zeros((4, 2), int), np.zeros((4, 2), int)
        for u, v, p in zip(t.tails.tolist(), t.heads.tolist(), choice):
            out[u, p] += 1
            inn[v, p] += 1
        assert not ((out <= tx).all() and (inn <= rx).all())


def test_assign_input_errors():
    t = build("ring(6, 2)")
    fabric = planes_fabric(8, 2)
    with pytest.raises(AssignmentError, match="6 nodes but 5 hosts"):
        assign_ports(fabric, ["h0", "h1", "h2", "h3", "h4"], t)
    with pytest.raises(AssignmentError, match="'h1' is given for more than one node"):
        assign_ports(fabric, ["h0", "h1", "h1", "h3", "h4", "h5"], t)
    with pytest.raises(AssignmentError, match="no host 'h9'"):
        assign_ports(fabric, ["h0", "h1", "h2", "h3", "h4", "h9"], t)
    with pytest.raises(AssignmentError, match="konig.*uniform"):
        assign_ports(custom_fabric([[(0, 0), (1, 1)], [(0, 0), (0, 0)]] * 3, 2), [f"h{i}" for i in range(6)],
                     t, method="konig")


def test_check_catches_tampering():
    t = build("torus(4, 4)")
    fabric = planes_fabric(16, 4)
    a = assign_ports(fabric, [h.id for h in fabric.hosts], t)
    bad = Assignment.from_dict(a.to_dict())
    bad.egress[0] = (bad.egress[0] + 1) % 16
    with pytest.raises(AssignmentError, match="arc 0"):
        bad.check(fabric)
    bad = Assignment.from_dict(a.to_dict())
    bad.tx_port[1] = bad.tx_port[0]
    with pytest.raises(AssignmentError):
        bad.check(fabric)


# ----- fabric validation -----------------------------------------------------------------------------
def _one_port_hosts(spec):
    return [Host(h, (HostPort(Fiber(*tx), Fiber(*rx)),)) for h, tx, rx in spec]


def test_fabric_validation_errors():
    panels = [Panel("pp", "patch_panel", 4)]
    with pytest.raises(CablingError, match=r"panel 'pp' port 1 ingress is cabled twice: host 'a' port 0 tx and host 'b' port 0 tx"):
        Fabric(panels, _one_port_hosts([("a", ("pp", 1), ("pp", 0)), ("b", ("pp", 1), ("pp", 1))]))
    with pytest.raises(CablingError, match=r"panel 'pp' port 2 egress is cabled twice"):
        Fabric(panels, _one_port_hosts([("a", ("pp", 0), ("pp", 2)), ("b", ("pp", 1), ("pp", 2))]))
    with pytest.raises(CablingError, match=r"host 'b' port 0 rx: panel 'pp' has ports 0..3, got 4"):
        Fabric(panels, _one_port_hosts([("a", ("pp", 0), ("pp", 0)), ("b", ("pp", 1), ("pp", 4))]))
    with pytest.raises(CablingError, match=r"host 'a' port 0 tx: unknown panel 'zz'"):
        Fabric(panels, _one_port_hosts([("a", ("zz", 0), ("pp", 0))]))
    with pytest.raises(CablingError, match="host 'b' has 2 ports but host 'a' has 1"):
        Fabric([Panel("pp", "ocs", 8)], _one_port_hosts([("a", ("pp", 0), ("pp", 0))]) + [
            Host("b", (HostPort(Fiber("pp", 1), Fiber("pp", 1)), HostPort(Fiber("pp", 2), Fiber("pp", 2))))])
    with pytest.raises(CablingError, match="kind 'switch'"):
        Fabric([Panel("pp", "switch", 4)], _one_port_hosts([("a", ("pp", 0), ("pp", 0))]))
    with pytest.raises(CablingError, match="panel 'pp' is declared twice"):
        Fabric([Panel("pp", "ocs", 4)] * 2, _one_port_hosts([("a", ("pp", 0), ("pp", 0))]))
    with pytest.raises(CablingError, match="host 'a' is declared twice"):
        Fabric(panels, _one_port_hosts([("a", ("pp", 0), ("pp", 0)), ("a", ("pp", 1), ("pp", 1))]))
    with pytest.raises(CablingError, match="port count"):
        Fabric([Panel("pp", "ocs", 0)], _one_port_hosts([("a", ("pp", 0), ("pp", 0))]))
    with pytest.raises(CablingError, match="at least 8 ports"):
        planes_fabric(8, 2, panel_ports=4)
    assert issubclass(CablingError, ValueError) and issubclass(AssignmentError, FabricError)


def test_fabric_tx_and_rx_on_different_panels_is_valid():
    f = Fabric([Panel("a", "ocs", 2), Panel("b", "patch_panel", 2)],
               _one_port_hosts([("h0", ("a", 0), ("b", 1)), ("h1", ("b", 0), ("a", 0))]))
    assert f.ingress_owner("a", 0) == ("h0", 0) and f.egress_owner("b", 1) == ("h0", 0)
    assert f.egress_owner("a", 1) is None


def test_fabric_from_dict_errors_and_roundtrip():
    f = planes_fabric(["x", "y", "z"], 2, kind="ocs", panel_ports=8, fabric_id="f1")
    d = json.loads(json.dumps(f.to_dict()))
    assert d["ports_per_host"] == 2 and d["panels"][1] == {"id": "plane1", "kind": "ocs", "ports": 8}
    assert d["hosts"][2]["ports"][1] == {"tx": {"panel": "plane1", "port": 2}, "rx": {"panel": "plane1", "port": 2}}
    assert Fabric.from_dict(d).to_dict() == d
    d["hosts"][0]["ports"][0]["tx"] = {"panel": "plane0"}
    with pytest.raises(CablingError, match="host 'x' port 0 tx: needs 'panel' and 'port'"):
        Fabric.from_dict(d)
    with pytest.raises(CablingError, match="'panels' and 'hosts' must be lists"):
        Fabric.from_dict({"id": "f"})
    d = f.to_dict()
    d["hosts"][1]["ports"][0]["rx"]["port"] = 0                           # x's rx already there
    with pytest.raises(CablingError, match="panel 'plane0' port 0 egress is cabled twice: host 'x' port 0 rx and host 'y' port 0 rx"):
        Fabric.from_dict(d)


def test_shared_layout_names_its_panel_from_the_prefix():
    fab = shared_panel_fabric(4, 2, fabric_id="s", panel_prefix="s-p", lookahead=True)
    assert [p.id for p in fab.panels] == ["s-p0"]
    assert {f.panel for h in fab.hosts for hp in h.ports for f in (hp.tx, hp.rx, hp.alt_tx, hp.alt_rx)} == {"s-p0"}
    assert [p.id for p in shared_panel_fabric(4, 2).panels] == ["panel0"]
