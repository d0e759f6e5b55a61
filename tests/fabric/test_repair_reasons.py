"""A repair that cannot move the failed arcs names every one of them, and a re-patch's config reason names
every arc it moved (not only the first)."""
from __future__ import annotations

import pytest

from services.fabric import planes_fabric
from services.fabric.assign import assign_ports
from services.fabric.repair import RepairError, repatch
from services.jobs.kinds.revision import _repatched
from services.synthesis.topology.catalog import build


def test_an_impossible_repair_names_every_arc_it_cannot_move():
    fabric = planes_fabric(8, 4)                        # degree 4 on 4 ports per host: no spare port anywhere
    topo = build("circulant(8, 1, 3)")
    a = assign_ports(fabric, [h.id for h in fabric.hosts], topo)
    failed = [0, 5]                                     # two arcs on different hosts
    faults = [(a.panel[i], "ingress", int(a.ingress[i])) for i in failed]
    with pytest.raises(RepairError) as err:
        repatch(fabric, a, faults)
    text = str(err.value)
    for i in failed:
        assert f"arc {int(a.tails[i])}>{int(a.heads[i])}" in text, text


def test_a_repatch_reason_names_every_moved_arc():
    reason = _repatched(3, ["0>1", "5>2", "7>4"])
    assert reason == "revision 3: 3 failed link(s) re-patched: 0>1, 5>2, 7>4"
    many = _repatched(3, [f"{i}>{i + 1}" for i in range(100)])
    assert len(many) <= 200 and many.endswith("more") and "0>1" in many
