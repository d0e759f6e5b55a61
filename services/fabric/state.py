"""Reservations: which plan holds which hosts of a fabric, their assignments and the panels' desired state.

Sharding (TopoOpt section 3, Fig. 26): no two active plans share a host. Panel ports belong to the host whose fiber
lands on them, so holding a host holds its panel ports; releasing a plan frees both, and its
cross-connects leave the panels' desired configs.

`FabricState` is an in-memory value the service rebuilds from its tables (`from_dict`) for each
operation and persists (`to_dict`, or row by row) afterwards; the service must serialise reserve /
release on one fabric (a row lock, or a unique (fabric_id, host_id) constraint on active reservations).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from .assign import Assignment, AssignmentError, assign_ports
from .crossconnect import PanelDiff, diff_connections, panel_configs
from .model import Fabric, FabricError


class ReservationError(FabricError):
    """A reservation request that cannot be honoured (unknown host or plan, too few free hosts...)."""


class HostBusyError(ReservationError):
    """Hosts already held by another active plan. `conflicts` maps host id -> holding plan id."""

    def __init__(self, plan_id: str, conflicts: dict[str, str]):
        self.plan_id = plan_id
        self.conflicts = dict(conflicts)
        first_host, first_plan = next(iter(self.conflicts.items()))
        by_plan: dict[str, list[str]] = {}
        for h, p in self.conflicts.items():
            by_plan.setdefault(p, []).append(h)
        detail = "; ".join(f"{', '.join(repr(h) for h in hs)} held by plan {p!r}" for p, hs in by_plan.items())
        super().__init__(f"plan {plan_id!r} cannot reserve host {first_host!r}: it is held by plan "
                         f"{first_plan!r} ({detail})")


@dataclass(frozen=True)
class Reservation:
    plan_id: str
    hosts: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"plan_id": self.plan_id, "hosts": list(self.hosts)}


class FabricState:
    def __init__(self, fabric: Fabric):
        self.fabric = fabric
        self.reservations: dict[str, Reservation] = {}
        self.assignments: dict[str, Assignment] = {}
        self._holder: dict[str, str] = {}

    # ----- queries -----------------------------------------------------------------------------
    def holder(self, host_id: str) -> str | None:
        self.fabric.host(host_id)
        return self._holder.get(host_id)

    def free_hosts(self) -> list[str]:
        """Hosts no active plan holds, in fabric order."""
        return [h.id for h in self.fabric.hosts if h.id not in self._holder]

    def held_ports(self, plan_id: str) -> dict[str, dict[str, list[int]]]:
        """Panel ports held through the plan's hosts: {panel: {"ingress": [...], "egress": [...]}}."""
        res = self._reservation(plan_id)
        out: dict[str, dict[str, list[int]]] = {}
        for h in res.hosts:
            for hp in self.fabric.host(h).ports:
                out.setdefault(hp.tx.panel, {"ingress": [], "egress": []})["ingress"].append(hp.tx.port)
                out.setdefault(hp.rx.panel, {"ingress": [], "egress": []})["egress"].append(hp.rx.port)
        return {p: {k: sorted(v) for k, v in sides.items()} for p, sides in sorted(out.items())}

    def port_holder(self, panel_id: str, port: int) -> dict[str, str | None]:
        """Plan holding each side of a panel port ({"ingress": plan|None, "egress": plan|None})."""
        self.fabric.panel(panel_id)
        ing = self.fabric.ingress_owner(panel_id, port)
        eg = self.fabric.egress_owner(panel_id, port)
        return {"ingress": None if ing is None else self._holder.get(ing[0]),
                "egress": None if eg is None else self._holder.get(eg[0])}

    def _reservation(self, plan_id: str) -> Reservation:
        try:
            return self.reservations[plan_id]
        except KeyError:
            raise ReservationError(f"plan {plan_id!r} holds no hosts of fabric {self.fabric.id!r}") from None

    # ----- reserve / release -------------------------------------------------------------------
    def reserve(self, plan_id: str, hosts: Sequence[str] | None = None, *, count: int | None = None) -> Reservation:
        """Reserve an explicit host list (kept in the given order: node i -> hosts[i]) or the first
        `count` free hosts in fabric order. All or nothing."""
        if not isinstance(plan_id, str) or not plan_id:
            raise ReservationError(f"plan id must be a non-empty string, got {plan_id!r}")
        if plan_id in self.reservations:
            raise ReservationError(f"plan {plan_id!r} already holds hosts of fabric {self.fabric.id!r}; "
                                   f"release it first")
        if (hosts is None) == (count is None):
            raise ReservationError("give either an explicit host list or a host count")
        if hosts is None:
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ReservationError(f"host count must be a positive integer, got {count!r}")
            free = self.free_hosts()
            if count > len(free):
                raise ReservationError(f"plan {plan_id!r} asks for {count} hosts but fabric {self.fabric.id!r} "
                                       f"has only {len(free)} free (of {len(self.fabric.hosts)})")
            chosen = tuple(free[:count])
        else:
            chosen = tuple(str(h) for h in hosts)
            if not chosen:
                raise ReservationError("the host list is empty")
            seen: set[str] = set()
            for h in chosen:
                if h not in self.fabric.host_index:
                    raise ReservationError(f"fabric {self.fabric.id!r} has no host {h!r}")
                if h in seen:
                    raise ReservationError(f"host {h!r} is listed twice")
                seen.add(h)
            busy = {h: self._holder[h] for h in chosen if h in self._holder}
            if busy:
                raise HostBusyError(plan_id, busy)
        res = Reservation(plan_id, chosen)
        self.reservations[plan_id] = res
        for h in chosen:
            self._holder[h] = plan_id
        return res

    def assign(self, plan_id: str, topology, *, node_hosts: Sequence[str] | None = None,
               self_loops: str = "loopback", method: str = "auto") -> Assignment:
        """Port assignment of the plan's topology on its reserved hosts (node i -> reservation.hosts[i],
        or `node_hosts`, a reordering of them). Replaces any earlier assignment of the plan."""
        res = self._reservation(plan_id)
        mapping = res.hosts if node_hosts is None else tuple(node_hosts)
        if sorted(mapping) != sorted(res.hosts):
            raise AssignmentError(f"plan {plan_id!r}: node_hosts must be a reordering of its reserved hosts")
        a = assign_ports(self.fabric, mapping, topology, plan_id=plan_id, self_loops=self_loops, method=method)
        self.assignments[plan_id] = a
        return a

    def bind(self, plan_id: str, topology, hosts: Sequence[str] | None = None, **kw) -> Assignment:
        """reserve (explicit hosts, or the first topology.nodes free hosts) + assign; on failure to
        assign the reservation is rolled back."""
        self.reserve(plan_id, hosts, count=None if hosts is not None else topology.nodes)
        try:
            return self.assign(plan_id, topology, **kw)
        except FabricError:
            self.release(plan_id)
            raise

    def release(self, plan_id: str) -> Reservation:
        """Free the plan's hosts (and so their panel ports) and drop its cross-connects."""
        res = self._reservation(plan_id)
        del self.reservations[plan_id]
        self.assignments.pop(plan_id, None)
        for h in res.hosts:
            del self._holder[h]
        return res

    # ----- panel configs -----------------------------------------------------------------------
    def panels_of(self, plan_id: str) -> list[str]:
        """Panels the plan's cross-connects touch (the plan is fabric_ready when all applied theirs)."""
        self._reservation(plan_id)
        a = self.assignments.get(plan_id)
        return [] if a is None else sorted(a.cross_connects())

    def panel_configs(self, panels: Iterable[str] | None = None) -> dict[str, dict]:
        """Desired config of every (or the given) panel: the union of all active assignments."""
        return panel_configs(self.fabric, [self.assignments[p] for p in sorted(self.assignments)], panels)

    def panel_config(self, panel_id: str) -> dict:
        return self.panel_configs([panel_id])[panel_id]

    def diff(self, panel_id: str, current: Iterable, *, prune_idle: bool = True) -> PanelDiff:
        """Changes taking the panel from `current` to its desired config. With prune_idle=False, stale
        connections between ports of hosts no plan holds (or uncabled ports) are kept, not removed."""
        panel = self.fabric.panel(panel_id)
        desired = self.panel_config(panel_id)["cross_connects"]

        def idle(ingress: int, egress: int) -> bool:
            h = self.port_holder(panel_id, ingress)["ingress"], self.port_holder(panel_id, egress)["egress"]
            return h == (None, None)

        return diff_connections(current, desired, panel=panel_id, ports=panel.ports,
                                idle=None if prune_idle else idle)

    # ----- JSON --------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"fabric": self.fabric.to_dict(),
                "reservations": [self.reservations[p].to_dict() for p in sorted(self.reservations)],
                "assignments": [self.assignments[p].to_dict() for p in sorted(self.assignments)]}

    @classmethod
    def from_dict(cls, data: dict, fabric: Fabric | None = None) -> "FabricState":
        """Rebuild from to_dict (or from the service's rows: a fabric, reservations, assignments);
        re-validates: overlapping reservations and inconsistent assignments raise."""
        st = cls(fabric if fabric is not None else Fabric.from_dict(data["fabric"]))
        for r in data.get("reservations", []):
            st.reserve(r["plan_id"], r["hosts"])
        for a in data.get("assignments", []):
            asg = a if isinstance(a, Assignment) else Assignment.from_dict(a)
            res = st._reservation(asg.plan_id)
            if sorted(asg.hosts) != sorted(res.hosts):
                raise AssignmentError(f"assignment of plan {asg.plan_id!r} uses hosts it does not hold")
            asg.check(st.fabric)
            st.assignments[asg.plan_id] = asg
        return st
