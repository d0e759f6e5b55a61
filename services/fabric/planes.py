"""Active and look-ahead planes (TopoOpt App. C, Fig. 25): reservations on both sides of
the hosts' 1x2 switches.

Every host port of a look-ahead fabric has a 1x2 optical switch with two sides (`Fabric.side(0)` and
`side(1)`, each its own pair of fibers, normally on different panels). The side a host's switches point at is
its **active** plane, where the job running on the host sends light; the other side is its **look-ahead**
plane, where the next job's cross-connects are provisioned (minutes on a patch panel) while the current job
runs. Flipping the switches (`activate`) makes the look-ahead side active: the two planes swap roles (our
assumption; TopoOpt does not say how the plane is reused after a flip).

A plan holds its hosts on one physical side; a side is a FabricState of its own (services.fabric.state: no
two plans share a host on one side), so a host can carry at once the job running on its active side and the
next job's topology on its look-ahead side. All of a plan's hosts must use the same side (in TopoOpt's
cabling the sides are different panels, so an arc between hosts on different sides has no panel).
Fabrics without look-ahead have side 0 only, and every plan binds there.
"""
from __future__ import annotations

from typing import Sequence

from .assign import Assignment, AssignmentError
from .crossconnect import panel_configs
from .model import Fabric
from .state import FabricState, ReservationError

__all__ = ["PlanesState", "ACTIVE", "LOOKAHEAD"]

ACTIVE, LOOKAHEAD = "active", "lookahead"


class PlanesState:
    """Reservations and assignments of a fabric on each side of its 1x2 switches.

    `active_side` maps host id -> the side its switches point at (hosts not listed: side 0).

    Examples
    --------
    >>> from services.fabric import planes_fabric
    >>> from services.synthesis.topology.catalog import build
    >>> st = PlanesState(planes_fabric(4, 1, lookahead=True))
    >>> a, side_a = st.bind("running", build("ring(4)"))
    >>> b, side_b = st.bind("next", build("ring(4)"), plane=LOOKAHEAD)      # the same hosts, ahead
    >>> (side_a, a.panel[0]), (side_b, b.panel[0])
    ((0, 'plane0'), (1, 'plane0-alt'))
    """

    def __init__(self, fabric: Fabric, active_side: dict[str, int] | None = None):
        self.fabric = fabric
        self.sides = {s: FabricState(fabric.side(s)) for s in ((0, 1) if fabric.lookahead else (0,))}
        self.active_side = dict(active_side or {})
        self.side_of: dict[str, int] = {}

    def check_plane(self, plane: str) -> None:
        """Refuse a look-ahead plane on a fabric without one (ReservationError, with what to do)."""
        if plane == LOOKAHEAD and not self.fabric.lookahead:
            raise ReservationError(f"fabric {self.fabric.id!r} has no look-ahead planes (no alt fibers on its host "
                                   "ports); register it with them to provision a job ahead")

    def side_for(self, host_id: str, plane: str) -> int:
        """The physical side of a host that is its `plane` (active or lookahead) now."""
        a = self.active_side.get(host_id, 0)
        return a if plane == ACTIVE else 1 - a

    def plane_of(self, host_id: str, side: int) -> str:
        return ACTIVE if side == self.active_side.get(host_id, 0) else LOOKAHEAD

    # ----- from rows --------------------------------------------------------------------------------
    def add(self, plan_id: str, side: int, assignment: dict | Assignment) -> None:
        """A binding as stored: its hosts held on `side`, its assignment re-checked on that side."""
        if side not in self.sides:
            raise ReservationError(f"fabric {self.fabric.id!r} has no side {side}")
        st = self.sides[side]
        asg = assignment if isinstance(assignment, Assignment) else Assignment.from_dict(assignment)
        st.reserve(plan_id, asg.hosts)
        asg.check(st.fabric)
        st.assignments[plan_id] = asg
        self.side_of[plan_id] = side

    # ----- binding ----------------------------------------------------------------------------------
    def bind(self, plan_id: str, topology, hosts: Sequence[str] | None = None, *,
             plane: str = ACTIVE) -> tuple[Assignment, int]:
        """Reserve hosts on their `plane` (active: the job runs there at once; lookahead: provisioned while
        the hosts' active plane may still run another job) and assign ports. Returns (assignment, side)."""
        self.check_plane(plane)
        if hosts is not None:
            for h in hosts:
                self.fabric.host(h)
            sides = {}
            for h in hosts:
                sides.setdefault(self.side_for(h, plane), []).append(h)
            if len(sides) > 1:
                detail = "; ".join(f"side {s}: {', '.join(repr(h) for h in hs[:4])}{'...' if len(hs) > 4 else ''}"
                                   for s, hs in sorted(sides.items()))
                raise ReservationError(f"the {plane} planes of these hosts are on different sides of their 1x2 "
                                       f"switches ({detail}); a plan's hosts must share one side")
            side = next(iter(sides))
        else:
            side, hosts = self._free(topology.nodes, plane)
        asg = self.sides[side].bind(plan_id, topology, hosts)
        self.side_of[plan_id] = side
        return asg, side

    def _free(self, count: int, plane: str) -> tuple[int, list[str]]:
        """The first `count` hosts (fabric order) whose `plane` is free, all on one side."""
        found = {}
        for s, st in self.sides.items():
            found[s] = [h for h in st.free_hosts() if self.side_for(h, plane) == s]
            if len(found[s]) >= count:
                return s, found[s][:count]
        have = " and ".join(f"{len(v)} on side {s}" for s, v in found.items()) if len(found) > 1 else str(len(found[0]))
        raise ReservationError(f"{count} hosts with a free {plane} plane are needed but fabric {self.fabric.id!r} has "
                               f"only {have} (of {len(self.fabric.hosts)})")

    def release(self, plan_id: str) -> None:
        self.sides[self.side_of.pop(plan_id)].release(plan_id)

    def replace_assignment(self, plan_id: str, assignment: Assignment) -> None:
        """A re-patched assignment of a bound plan (the same hosts and arcs, other ports)."""
        st = self.sides[self.side_of[plan_id]]
        if tuple(assignment.hosts) != tuple(st.assignments[plan_id].hosts):
            raise AssignmentError(f"plan {plan_id!r}: a replacement assignment must keep its hosts")
        assignment.check(st.fabric)
        st.assignments[plan_id] = assignment

    # ----- configs ----------------------------------------------------------------------------------
    def assignment(self, plan_id: str) -> Assignment:
        return self.sides[self.side_of[plan_id]].assignments[plan_id]

    def panels_of(self, plan_id: str) -> list[str]:
        return self.sides[self.side_of[plan_id]].panels_of(plan_id)

    def panel_config(self, panel_id: str) -> dict:
        """The panel's desired cross-connects (every plan's, both sides), each tagged with its `side`."""
        assignments = [st.assignments[p] for st in self.sides.values() for p in sorted(st.assignments)]
        cfg = panel_configs(self.fabric, assignments, [panel_id])[panel_id]
        for c in cfg["cross_connects"]:
            c["side"] = self.side_of.get(c.get("plan_id"), 0)
        return cfg
