"""The placement policy (services.fabric.placement): robot moves from what the panels applied, the ready time
from the device profiles, fragmentation across panel groups, and first-fit for comparison."""
from __future__ import annotations

import pytest

from services.fabric import planes_fabric
from services.fabric.model import Fabric
from services.fabric.placement import PlacementError, place
from services.fabric.planes import LOOKAHEAD, PlanesState
from services.synthesis.topology.catalog import build


def _applied(state: PlanesState) -> dict[str, list[tuple[int, int]]]:
    """What the agents hold after applying every current config (the stale ones stay: a patch panel keeps them)."""
    return {p: [(c["ingress"], c["egress"]) for c in cfg["cross_connects"]]
            for p, cfg in state.sides[0].panel_configs().items()}


def test_a_job_lands_where_the_same_shape_was_wired():
    st = PlanesState(planes_fabric(16, 2))
    ring = build("ring(4)")
    st.bind("old", ring, ["h04", "h05", "h06", "h07"])
    applied = _applied(st)
    st.release("old")                              # released: its cross-connects are still plugged in
    p = place(st, ring, applied)
    assert p.chosen.hosts == ("h04", "h05", "h06", "h07") and p.chosen.moves == 0
    assert p.chosen.ready_estimate_s == 0.0
    ff = place(st, ring, applied, policy="first-fit")
    assert ff.chosen.hosts == ("h00", "h01", "h02", "h03") and ff.chosen.moves == 4
    assert ff.chosen.ready_estimate_s == 300.0     # one robot batch of at most 48 moves
    assert all(a.moves >= p.chosen.moves for a in p.alternatives)


def test_moves_are_cross_connects_not_in_place_and_time_follows_the_profile():
    fab = Fabric.from_dict({**planes_fabric(64, 4).to_dict(), "id": "f"})
    st = PlanesState(fab)
    p = place(st, build("ring(64)"))          # 64 arcs: 64 cross-connects, none in place yet
    assert p.chosen.moves == sum(p.chosen.moves_by_panel.values()) == 64
    worst = max(p.chosen.moves_by_panel.values())
    assert p.chosen.ready_estimate_s == 300.0 * -(-worst // 48)


def test_groups_keep_a_job_in_one_island_and_first_fit_fails_across():
    doc = planes_fabric(8, 1).to_dict()
    doc["panels"] = [{"id": "a", "kind": "patch_panel", "ports": 8}, {"id": "b", "kind": "patch_panel", "ports": 8}]
    for i, h in enumerate(doc["hosts"]):
        panel = "a" if i in (0, 2, 4, 6) else "b"
        h["ports"][0] = {"tx": {"panel": panel, "port": i}, "rx": {"panel": panel, "port": i}}
    st = PlanesState(Fabric.from_dict(doc))
    p = place(st, build("ring(4)"))
    assert p.chosen.hosts == ("h0", "h2", "h4", "h6")              # one island: panel a
    assert p.chosen.largest_free_after == 4
    with pytest.raises(PlacementError, match="at most 4"):
        place(st, build("ring(5)"))


def test_lookahead_plane_and_refusals():
    st = PlanesState(planes_fabric(8, 1, lookahead=True))
    st.bind("running", build("ring(8)"))
    p = place(st, build("ring(4)"), plane=LOOKAHEAD)
    assert p.chosen.side == 1 and len(p.chosen.hosts) == 4
    with pytest.raises(PlacementError):
        place(st, build("ring(4)"))                                # the active plane is full
    with pytest.raises(PlacementError, match="policy"):
        place(st, build("ring(4)"), policy="best")


def test_a_lookahead_placement_needs_lookahead_planes():
    from services.fabric.state import ReservationError

    with pytest.raises(ReservationError, match="no look-ahead planes"):
        place(PlanesState(planes_fabric(8, 1)), build("ring(4)"), plane=LOOKAHEAD)
