"""Where a new job's hosts should go on a busy fabric (TopoOpt section 3 and App. C: a job gets a shard of
servers and their optical ports; its panels are reconfigured before it starts).

A placement is a list of free hosts for the job's topology (node i -> hosts[i]), all on one side of their 1x2
switches (a plan's hosts share one plane). The policy weighs:
- (a) the job's iteration time on the topology it gets: the topology is chosen before placement and any host set
  that can be wired realises it exactly (the panels carry its arcs; `assign_ports` refuses a set that cannot),
  so every candidate gives the job the same time; candidates that cannot be wired are dropped;
- (b) the reconfiguration the panels need from what their agents last applied: a robotic patch panel re-plugs
  one fiber per cross-connect (TopoOpt App. B: "a robotic arm moves one transmit fiber onto one receive
  fiber"), so the moves are the job's cross-connects not already in place (`applied`: the connections each
  panel's agent last reported applied; stale connections of idle ports are left where they are), and the time
  is each panel's profile (`reconfiguration_time_s`: batches of `robot_batch_size` per `reconfiguration_s`, an
  OCS's one switching time), the panels working in parallel;
- (c) fragmentation: the largest job the free hosts can still take afterwards, i.e. the most free hosts of one
  reconfigurable group (hosts cabled to the same panels, port by port: `export.reconfigurable_groups`) on one
  side.
`min-reconfiguration` ranks candidates by (ready time, moves, largest free set afterwards: more is better,
fabric order); `first-fit` takes the first free hosts of one side in fabric order, blind to panel groups (the
behaviour without a policy), and fails when they cannot be wired.

Candidates (at most `max_candidates`, each one port assignment): for each side and reconfigurable group, windows
of consecutive free hosts (in fabric order) of the job's size, starting at the first free host, at every host
whose ports hold applied cross-connects of a released job and whose predecessor does not (so a job of the same
shape lands exactly where the previous one was wired), and evenly spaced in between.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .assign import assign_ports
from .export import reconfigurable_groups
from .model import FabricError
from .planes import ACTIVE, PlanesState

__all__ = ["POLICIES", "Placement", "PlacementCandidate", "PlacementError", "place"]

POLICIES = ("min-reconfiguration", "first-fit")
DEFAULT_CANDIDATES = 32


class PlacementError(FabricError):
    """No free hosts can take the job: too few free hosts on one side of one group (`full`: the fabric is busy,
    try later), or no candidate can be wired (the job does not fit the cabling)."""

    def __init__(self, message: str, *, full: bool = False):
        super().__init__(message)
        self.full = full


@dataclass(frozen=True)
class PlacementCandidate:
    """One host set: its side, the robot moves per panel, when its panels are ready, and the largest job the
    free hosts could still take after it."""

    hosts: tuple[str, ...]
    side: int
    moves: int
    moves_by_panel: dict[str, int]
    ready_estimate_s: float
    largest_free_after: int

    def to_dict(self) -> dict:
        return {"hosts": list(self.hosts), "side": self.side, "moves": self.moves,
                "moves_by_panel": dict(self.moves_by_panel), "ready_estimate_s": self.ready_estimate_s,
                "largest_free_after": self.largest_free_after}


@dataclass(frozen=True)
class Placement:
    policy: str
    chosen: PlacementCandidate
    alternatives: tuple[PlacementCandidate, ...] = field(default=())
    candidates_considered: int = 0

    def to_dict(self) -> dict:
        return {"policy": self.policy, "hosts": list(self.chosen.hosts), "side": self.chosen.side,
                "moves": self.chosen.moves, "moves_by_panel": dict(self.chosen.moves_by_panel),
                "ready_estimate_s": self.chosen.ready_estimate_s,
                "largest_free_after": self.chosen.largest_free_after,
                "candidates_considered": self.candidates_considered,
                "alternatives": [a.to_dict() for a in self.alternatives]}


def _windows(free: list[str], size: int, marks: set[str], limit: int) -> list[tuple[str, ...]]:
    """Windows of `size` consecutive entries of `free` (module docstring), at most `limit`."""
    last = len(free) - size
    if last < 0:
        return []
    starts = [0] + [i for i in range(1, last + 1) if free[i] in marks and free[i - 1] not in marks]
    if last not in starts:
        starts.append(last)
    spare = max(0, limit - len(starts))
    if spare:
        step = max(1, (last + 1) // (spare + 1))
        starts += list(range(step, last, step))[:spare]
    return [tuple(free[i:i + size]) for i in sorted(dict.fromkeys(starts))[:limit]]


def place(state: PlanesState, topology, applied: Mapping[str, Iterable[tuple[int, int]]] | None = None, *,
          plane: str = ACTIVE, policy: str = "min-reconfiguration", max_candidates: int = DEFAULT_CANDIDATES,
          alternatives: int = 3) -> Placement:
    """The placement of `topology` on the fabric's free hosts (module docstring). `applied`: panel id ->
    (ingress, egress) pairs its agent last reported applied. Raises PlacementError when nothing fits.

    >>> from services.fabric import planes_fabric
    >>> from services.synthesis.topology.catalog import build
    >>> st = PlanesState(planes_fabric(8, 2))
    >>> p = place(st, build("ring(4)"))
    >>> p.chosen.hosts, p.chosen.moves
    (('h0', 'h1', 'h2', 'h3'), 4)
    """
    if policy not in POLICIES:
        raise PlacementError(f"unknown placement policy {policy!r}; known: {', '.join(POLICIES)}")
    state.check_plane(plane)
    n = topology.nodes
    fabric = state.fabric
    applied_sets = {p: {(int(a), int(b)) for a, b in conns} for p, conns in (applied or {}).items()}
    marked = {fabric.ingress_owner(p, ing)[0] for p, conns in applied_sets.items() for ing, _ in conns
              if fabric.ingress_owner(p, ing) is not None}
    pools = []          # (side, free hosts of one group on that side, in fabric order)
    for side, st in state.sides.items():
        free = set(st.free_hosts())
        usable = {h for h in free if state.side_for(h, plane) == side}
        if policy == "first-fit":                                # fabric order, blind to panel groups
            pools.append((side, [h.id for h in fabric.hosts if h.id in usable]))
            continue
        for group in reconfigurable_groups(st.fabric):          # st.fabric: the ports as seen through `side`
            pool = [h for h in group if h in usable]
            if pool:
                pools.append((side, pool))
    largest_before = max((len(p) for _, p in pools), default=0)
    if largest_before < n and policy != "first-fit":
        raise PlacementError(f"{n} free hosts on one side of one panel group are needed; fabric {fabric.id!r} has "
                             f"at most {largest_before} (of {len(fabric.hosts)} hosts)", full=True)
    per_pool = max(1, max_candidates // max(1, len(pools))) if policy != "first-fit" else 1
    considered, found = 0, []
    for side, pool in pools:
        for hosts in _windows(pool, n, marked, per_pool):
            considered += 1
            try:
                asg = assign_ports(state.sides[side].fabric, hosts, topology)
            except FabricError:
                continue
            by_panel: dict[str, int] = {}
            for pid, conns in asg.cross_connects().items():
                have = applied_sets.get(pid, set())
                need = sum((c["ingress"], c["egress"]) not in have for c in conns)
                if need:
                    by_panel[pid] = need
            ready = max((fabric.panel(p).device().reconfiguration_time_s(k) for p, k in by_panel.items()),
                        default=0.0)
            taken = set(hosts)
            after = max((len(p) - len(taken.intersection(p)) for _, p in pools), default=0)
            found.append(PlacementCandidate(tuple(hosts), side, sum(by_panel.values()), by_panel, ready, after))
            if policy == "first-fit":
                break
        if policy == "first-fit" and found:
            break
    if not found and policy == "first-fit":
        full = max((len(p) for _, p in pools), default=0) < n
        raise PlacementError(f"only {max((len(p) for _, p in pools), default=0)} hosts of fabric {fabric.id!r} are "
                             f"free on one side" if full else f"the first {n} free hosts of fabric {fabric.id!r} "
                             f"cannot be wired as {topology.expr}", full=full)
    if not found:
        raise PlacementError(f"none of the {considered} candidate host sets of fabric {fabric.id!r} can be wired "
                             f"as {topology.expr}")
    if policy == "min-reconfiguration":
        found.sort(key=lambda c: (c.ready_estimate_s, c.moves, -c.largest_free_after))
    return Placement(policy, found[0], tuple(found[1:1 + alternatives]), considered)
