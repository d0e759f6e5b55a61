"""Fabric persistence and the controller protocol (DESIGN 4.5-4.7), over services.fabric.

Each operation rebuilds a PlanesState (services.fabric.planes: one FabricState per side of the hosts' 1x2
switches; side 0 only without look-ahead planes) from the rows (fabric spec, active bindings, switch
positions), applies the change and writes rows back, inside the caller's transaction. Every change of a
fabric's state - reserve, release, re-patch, activation, a panel's report - takes the fabric's lock before it
reads that state (services.store.db.write_lock: the fabric row FOR UPDATE on PostgreSQL, an immediate
transaction on SQLite), so two of them never interleave: a report sees every report committed before it, and
`fabric_ready` is derived from every panel's newest report in the transaction that stores one. The
host_reservations primary key makes a shared host impossible even then. Panel configs are versioned: a new
version is written only when a panel's desired cross-connects change (by digest).

A panel report is stored only when it is newer than the stored one (`newer`): its config version is higher,
or the same with a higher `sequence` (the agent's report counter; reports of one version without sequences
count in the order they arrive). An older or replayed report is refused (StaleReport) and changes nothing.
"""
from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from services.fabric import Fabric, FabricError, diff_connections
from services.fabric.crossconnect import config_digest
from services.fabric.devices import profile_for
from services.fabric.placement import place
from services.fabric.planes import ACTIVE, LOOKAHEAD, PlanesState

from . import notify
from .db import insert_new, write_lock
from .models import (FabricRow, HostPlane, HostReservation, PanelConfig, PanelRow, PanelState, Plan, PlanBinding,
                     PlanEvent, utcnow)

APPLIED = ("applied", "degraded")        # reports that hold the version's cross-connects (degraded: some failed)


class FabricConflict(Exception):
    """The fabric id or one of its panel ids is already registered."""


class StaleReport(Exception):
    """A panel report not newer than the stored one (older version, or a replayed sequence): not stored."""


def register(s: Session, fabric: Fabric) -> FabricRow:
    """Insert the fabric, its panels and their first (empty) configs; FabricConflict when the id or a panel id
    is taken, also by a registration running at the same time (first inserts: INSERT ... ON CONFLICT DO
    NOTHING, panels in id order so two registrations never wait on each other in a cycle). On FabricConflict
    the caller rolls the transaction back."""
    write_lock(s)
    if not insert_new(s, FabricRow, id=fabric.id, spec=fabric.to_dict(), created_at=utcnow()):
        raise FabricConflict(f"fabric {fabric.id!r} already exists")
    taken = [p.id for p in sorted(fabric.panels, key=lambda p: p.id)
             if not insert_new(s, PanelRow, id=p.id, fabric_id=fabric.id, kind=p.kind, ports=p.ports)]
    if taken:
        raise FabricConflict(f"panel ids {taken} belong to another fabric (panel ids are global)")
    for p in fabric.panels:
        s.add(PanelConfig(panel_id=p.id, version=1, connections=[], reason="registered (no cross-connects)"))
    s.flush()
    return s.get(FabricRow, fabric.id)


def _lock(s: Session, fabric_id: str) -> FabricRow | None:
    """The fabric's lock (services.store.db.write_lock), held until the transaction ends; its row or None."""
    return write_lock(s, select(FabricRow).where(FabricRow.id == fabric_id))


def lock_panel(s: Session, panel_id: str) -> PanelRow | None:
    """Take the lock of the panel's fabric before reading anything of its state (a report's transaction);
    the panel, or None when it does not exist."""
    panel = s.get(PanelRow, panel_id)
    if panel is None or write_lock(s, select(FabricRow.id).where(FabricRow.id == panel.fabric_id)) is None:
        return None                     # (the lock without the fabric's spec: reports take it often)
    return s.get(PanelRow, panel_id, populate_existing=True)


def lock_for_plan(s: Session, plan_id: str) -> None:
    """Before a change of a plan's fabric state from outside a panel report (a failure report: port faults,
    a revision number): the lock of the fabric it is bound to, or on SQLite the write lock when unbound."""
    b = s.get(PlanBinding, plan_id)
    if b is None:
        write_lock(s)
    else:
        _lock(s, b.fabric_id)


def newer(last: PanelState | None, version: int, sequence: int | None) -> str | None:
    """None when a report of (version, sequence) is newer than the stored one `last`, else why it is not: a
    lower version is stale; the same version with a sequence not above the stored one's is a replay."""
    if last is None:
        return None
    if version < last.reported_version:
        return (f"version {version} is older than the panel's last report (version {last.reported_version}); "
                "a stale report changes nothing")
    if (version == last.reported_version and sequence is not None and last.report_sequence is not None
            and sequence <= last.report_sequence):
        return (f"sequence {sequence} is not above the panel's last report of version {version} (sequence "
                f"{last.report_sequence}): a replayed report changes nothing")
    return None


def active_sides(s: Session, fabric_id: str) -> dict[str, int]:
    """Host id -> the side its 1x2 switches point at (hosts never flipped: side 0, not listed)."""
    return {h.host_id: h.active_side for h in s.scalars(select(HostPlane).where(HostPlane.fabric_id == fabric_id))
            if h.active_side}


def load_state(s: Session, fabric_id: str) -> PlanesState:
    row = s.get(FabricRow, fabric_id)
    bindings = list(s.scalars(select(PlanBinding).where(PlanBinding.fabric_id == fabric_id,
                                                        PlanBinding.released.is_(False)).order_by(PlanBinding.plan_id)))
    state = PlanesState(Fabric.from_dict(row.spec), active_sides(s, fabric_id))
    for b in bindings:
        state.add(b.plan_id, b.assignment.get("side", 0), b.assignment)
    return state


def latest_versions(s: Session, fabric_ids: list[str]) -> dict[str, int]:
    """Panel id -> its latest config version, for every panel of these fabrics (one query)."""
    return dict(s.execute(select(PanelConfig.panel_id, func.max(PanelConfig.version))
                          .join(PanelRow, PanelRow.id == PanelConfig.panel_id)
                          .where(PanelRow.fabric_id.in_(fabric_ids)).group_by(PanelConfig.panel_id)).all())


def latest_configs(s: Session, panel_ids: list[str]) -> dict[str, PanelConfig]:
    """Panel id -> its latest config, for these panels (one query)."""
    if not panel_ids:
        return {}
    newest = (select(PanelConfig.panel_id, func.max(PanelConfig.version).label("version"))
              .where(PanelConfig.panel_id.in_(panel_ids)).group_by(PanelConfig.panel_id).subquery())
    q = select(PanelConfig).join(newest, (PanelConfig.panel_id == newest.c.panel_id)
                                 & (PanelConfig.version == newest.c.version))
    return {c.panel_id: c for c in s.scalars(q)}


def latest_config(s: Session, panel_id: str) -> PanelConfig | None:
    return s.scalar(select(PanelConfig).where(PanelConfig.panel_id == panel_id)
                    .order_by(PanelConfig.version.desc()).limit(1))


def _write_configs(s: Session, state: PlanesState, panels, reason: str) -> dict[str, int]:
    """A new version for every panel whose desired cross-connects changed; returns panel -> version."""
    versions = {}
    for pid in panels:
        cfg = state.panel_config(pid)
        cur = latest_config(s, pid)
        if cur is not None and config_digest(cur.connections) == cfg["digest"]:
            versions[pid] = cur.version
            continue
        version = (cur.version if cur else 0) + 1
        s.add(PanelConfig(panel_id=pid, version=version, connections=cfg["cross_connects"], reason=reason[:200]))
        notify.changed(s, "panel", pid)
        versions[pid] = version
    s.flush()
    return versions


def bind_plan(s: Session, plan_id: str, fabric_id: str, topology, hosts: list[str] | None,
              lookahead: bool = False) -> PlanBinding:
    """Reserve hosts (on their active plane, or with `lookahead` on their look-ahead plane: TopoOpt App. C),
    assign ports, write the panels' new config versions (raises FabricError subclasses with a reason a person
    can act on)."""
    if _lock(s, fabric_id) is None:
        raise FabricError(f"fabric {fabric_id!r} is not registered")
    existing = s.get(PlanBinding, plan_id, populate_existing=True)
    if existing is not None and not existing.released:
        return existing                                   # a redelivered task: already bound
    state = load_state(s, fabric_id)
    plane = LOOKAHEAD if lookahead else ACTIVE
    placement = None
    if hosts is None:                      # the placement policy picks them (services.fabric.placement)
        placement = place(state, topology, applied_connections(s, fabric_id), plane=plane)
        hosts = list(placement.chosen.hosts)
    asg, side = state.bind(plan_id, topology, hosts, plane=plane)
    if lookahead:
        _hold_lookahead(s, fabric_id, asg.hosts, plan_id, side)
    else:
        for h in asg.hosts:
            s.add(HostReservation(fabric_id=fabric_id, host_id=h, plan_id=plan_id))
    s.flush()                                              # the primary key rejects a shared host here
    panels = state.panels_of(plan_id)
    versions = _write_configs(s, state, panels, f"plan {plan_id} bound" + (" (look-ahead plane)" if lookahead else ""))
    extra = {"placement": placement.to_dict()} if placement is not None else {}
    binding = PlanBinding(plan_id=plan_id, fabric_id=fabric_id,
                          assignment={**asg.to_dict(), "side": side, "plane": plane, **extra},
                          required_versions={p: versions[p] for p in panels})
    s.merge(binding)
    s.add(PlanEvent(plan_id=plan_id, status=s.get(Plan, plan_id).status, stage="fabric",
                    progress=s.get(Plan, plan_id).progress,
                    message=f"hosts {asg.hosts[0]}..{asg.hosts[-1]} reserved on {fabric_id}"
                            + (f" (look-ahead plane, side {side})" if lookahead else "") + "; panels "
                            + ", ".join(f"{p} v{v}" for p, v in sorted(versions.items()))))
    return s.get(PlanBinding, plan_id)


class PlanRefused(Exception):
    """A fabric-bound plan request that cannot be bound (`check_plan`): `status` 404 (no such fabric), 422 (the
    request does not fit the fabric: `field` names what) or 409 (the fabric's hosts are taken now)."""

    def __init__(self, status: int, field: str, reason: str):
        super().__init__(reason)
        self.status, self.field, self.reason = status, field, reason


def check_plan(s: Session, fabric_id: str, nodes: int, degree: int, hosts: list[str] | None,
               lookahead: bool = False) -> None:
    """What the fabric stage would refuse, checked when the plan is requested (a constant number of queries,
    the fabric's spec read once): the fabric exists, the degree fits its hosts' ports, the named hosts are its
    own and free, and it has `nodes` free hosts. Raises PlanRefused. A plan accepted here may still lose a host
    to a plan bound first (the fabric stage refuses it then)."""
    row = s.get(FabricRow, fabric_id)
    if row is None:
        raise PlanRefused(404, "fabric_id", f"fabric {fabric_id!r} is not registered")
    spec = row.spec or {}
    spec_hosts = spec.get("hosts") or []
    ports = spec.get("ports_per_host") or (len(spec_hosts[0].get("ports") or []) if spec_hosts else 0)
    if degree > ports:
        raise PlanRefused(422, "degree", f"degree {degree} exceeds the {ports} ports per host of fabric {fabric_id!r}")
    if lookahead and not (spec_hosts and (spec_hosts[0].get("ports") or [{}])[0].get("alt")):
        raise PlanRefused(422, "lookahead", f"fabric {fabric_id!r} has no look-ahead planes (no alt fibers on its "
                          "host ports)")
    if lookahead:
        taken = dict(s.execute(select(HostPlane.host_id, HostPlane.lookahead_plan_id).where(
            HostPlane.fabric_id == fabric_id, HostPlane.lookahead_plan_id.is_not(None))).all())
    else:
        taken = dict(s.execute(select(HostReservation.host_id, HostReservation.plan_id)
                               .where(HostReservation.fabric_id == fabric_id)).all())
    plane = "look-ahead plane" if lookahead else "hosts"
    if hosts is not None:
        known = {h.get("id") for h in spec_hosts}
        unknown = [h for h in hosts if h not in known]
        if unknown:
            raise PlanRefused(422, "hosts", f"fabric {fabric_id!r} has no host {unknown[0]!r}"
                              + (f" (and {len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""))
        busy = [h for h in hosts if h in taken]
        if busy:
            raise PlanRefused(409, "hosts", f"host {busy[0]!r} of fabric {fabric_id!r} is held by plan "
                              f"{taken[busy[0]]}" + (f" (and {len(busy) - 1} more)" if len(busy) > 1 else "")
                              + "; release that plan or choose other hosts")
        return
    free = len(spec_hosts) - len(taken)
    if free < nodes:
        status = 422 if len(spec_hosts) < nodes else 409
        raise PlanRefused(status, "nodes", f"{nodes} hosts are needed but fabric {fabric_id!r} has "
                          + (f"only {len(spec_hosts)}" if status == 422 else
                             f"only {free} free {plane} (of {len(spec_hosts)}); release a plan or wait"))


def _hold_lookahead(s: Session, fabric_id: str, hosts, plan_id: str, side: int) -> None:
    """Record `plan_id` as the holder of the hosts' look-ahead plane (the fabric row is locked)."""
    rows = {h.host_id: h for h in s.scalars(select(HostPlane).where(HostPlane.fabric_id == fabric_id,
                                                                     HostPlane.host_id.in_(list(hosts))))}
    for h in hosts:
        row = rows.get(h)
        if row is None:
            s.add(HostPlane(fabric_id=fabric_id, host_id=h, active_side=1 - side, lookahead_plan_id=plan_id))
        elif row.lookahead_plan_id not in (None, plan_id):
            raise FabricError(f"host {h!r}: its look-ahead plane is held by plan {row.lookahead_plan_id!r}")
        else:
            row.lookahead_plan_id = plan_id


def replace_assignment(s: Session, plan_id: str, assignment, reason: str) -> dict[str, int]:
    """A bound plan re-patched (services.fabric.repair): its new assignment, new config versions of the panels
    whose cross-connects change, and its required versions; the plan is not fabric_ready until the panels
    apply them (a panel whose cross-connects did not change keeps the version it may have applied already).
    Returns panel -> version for the panels it now needs."""
    b = s.get(PlanBinding, plan_id)
    _lock(s, b.fabric_id)
    b = s.get(PlanBinding, plan_id, populate_existing=True)
    state = load_state(s, b.fabric_id)
    before = set(state.panels_of(plan_id))
    state.replace_assignment(plan_id, assignment)
    panels = state.panels_of(plan_id)
    versions = _write_configs(s, state, sorted(before | set(panels)), reason)
    b.assignment = {**assignment.to_dict(), "side": b.assignment.get("side", 0),
                    "plane": b.assignment.get("plane", ACTIVE)}
    b.required_versions = {p: versions[p] for p in panels}
    _derive_ready(s, b, f"{reason}; panels " + ", ".join(f"{p} v{v}" for p, v in sorted(b.required_versions.items())))
    notify.changed(s, "plan", plan_id)
    return dict(b.required_versions)


class PlaneConflict(Exception):
    """A look-ahead plan that cannot be activated now (the reason says why)."""


def activate(s: Session, plan_id: str) -> dict:
    """Flip the 1x2 switches of a look-ahead plan's hosts (TopoOpt App. C): its side becomes their active
    plane. Refused (PlaneConflict) while another plan still holds a host's active plane or before the panels
    applied the plan's configs. Returns the hosts' new switch positions."""
    b = s.get(PlanBinding, plan_id)
    if b is None or b.released:
        raise PlaneConflict(f"plan {plan_id} is not bound to a fabric" if b is None else
                            f"plan {plan_id} released its hosts")
    _lock(s, b.fabric_id)
    b = s.get(PlanBinding, plan_id, populate_existing=True)
    rows = list(s.scalars(select(HostPlane).where(HostPlane.fabric_id == b.fabric_id,
                                                  HostPlane.lookahead_plan_id == plan_id)))
    if not rows:
        raise PlaneConflict(f"plan {plan_id} is not provisioned on a look-ahead plane (already active, or bound "
                            "without lookahead)")
    busy = {r.host_id: r.plan_id for r in s.scalars(select(HostReservation).where(
        HostReservation.fabric_id == b.fabric_id, HostReservation.host_id.in_([r.host_id for r in rows])))}
    if busy:
        holders = sorted(set(busy.values()))
        raise PlaneConflict(f"{len(busy)} of its hosts still run another job (e.g. {sorted(busy)[0]!r} on plan "
                            f"{busy[sorted(busy)[0]]}); release {', '.join(holders)} first (DELETE "
                            f"/v1/plans/{{id}}/fabric)")
    if not b.fabric_ready:
        raise PlaneConflict(f"the look-ahead panels have not all applied plan {plan_id}'s configuration yet "
                            f"(needs {', '.join(f'{p} v{v}' for p, v in sorted(b.required_versions.items()))})")
    side = b.assignment.get("side", 0)
    b.assignment = {**b.assignment, "plane": ACTIVE}
    for r in rows:
        r.active_side, r.lookahead_plan_id = side, None
        s.add(HostReservation(fabric_id=b.fabric_id, host_id=r.host_id, plan_id=plan_id))
    s.flush()
    plan = s.get(Plan, plan_id)
    s.add(PlanEvent(plan_id=plan_id, status=plan.status, stage="fabric", progress=plan.progress,
                    message=f"activated: the 1x2 switches of {len(rows)} hosts flipped to side {side}; its "
                            "look-ahead plane is now their active plane"))
    for p in b.required_versions:
        notify.changed(s, "panel", p)
    notify.changed(s, "plan", plan_id)
    return {"plan_id": plan_id, "fabric_id": b.fabric_id, "side": side,
            "switches": {r.host_id: side for r in sorted(rows, key=lambda r: r.host_id)}}


def release_plan(s: Session, plan_id: str) -> PlanBinding | None:
    """Free the plan's hosts and ports; its cross-connects leave the panels' next config versions."""
    b = s.get(PlanBinding, plan_id)
    if b is None or b.released:
        return b
    _lock(s, b.fabric_id)
    b = s.get(PlanBinding, plan_id, populate_existing=True)
    if b.released:                                         # released meanwhile (two releases at once)
        return b
    touched = list(b.required_versions)
    b.released = True
    s.execute(delete(HostReservation).where(HostReservation.plan_id == plan_id))
    for row in s.scalars(select(HostPlane).where(HostPlane.lookahead_plan_id == plan_id)):
        row.lookahead_plan_id = None
    s.flush()
    state = load_state(s, b.fabric_id)
    _write_configs(s, state, touched, f"plan {plan_id} released")
    plan = s.get(Plan, plan_id)
    s.add(PlanEvent(plan_id=plan_id, status=plan.status, stage="fabric", progress=plan.progress,
                    message=f"released its hosts on {b.fabric_id}"))
    notify.changed(s, "plan", plan_id)
    return b


def report_state(s: Session, panel_id: str, version: int, status: str, message: str | None,
                 connections: list | None, sequence: int | None = None) -> tuple[list[str], list[str]]:
    """Record an agent's report (validated by the caller: connections in range, one-to-one, and equal to
    version `version`'s when `status` is applied or degraded), under the fabric's lock; StaleReport when it is
    not newer than the stored one (`newer`). Readiness follows the newest report: a plan is fabric_ready while
    every panel it touches last reported `applied` (or `degraded`: the version is in place and some of its
    cross-connects failed, which makes revisions of the plans they carry) for its version or a later one.
    Returns (plans that became ready, plans whose readiness changed either way)."""
    panel = lock_panel(s, panel_id)
    st = s.get(PanelState, panel_id, populate_existing=True)
    why = newer(st, version, sequence)
    if why is not None:
        raise StaleReport(why)
    if st is None:                       # the panel's first report (two at once: one inserts, both update)
        insert_new(s, PanelState, panel_id=panel_id, applied_version=0, reported_version=0, status=status,
                   reported_at=utcnow())
        st = s.get(PanelState, panel_id, populate_existing=True)
    if sequence is not None or version != st.reported_version:       # an unsequenced report keeps the bar
        st.report_sequence = sequence
    st.status, st.message, st.reported_version, st.reported_at = status, message, version, utcnow()
    if status in APPLIED:
        st.applied_version = version
    if connections is not None:
        st.connections = connections
    s.flush()
    notify.changed(s, "panel", panel_id)
    became_ready, changed = [], []
    bindings = [b for b in s.scalars(select(PlanBinding).where(PlanBinding.fabric_id == panel.fabric_id,
                                                                PlanBinding.released.is_(False)))
                if panel_id in b.required_versions]
    states = _states(s, {p for b in bindings for p in b.required_versions})
    for b in bindings:
        ready = _derive_ready(s, b, f"panel {panel_id} reported {status} for version {version}"
                                    + (f" ({message})" if message else ""), states)
        if ready is not None:
            became_ready += [b.plan_id] if ready else []
            changed.append(b.plan_id)
    return became_ready, changed


def _states(s: Session, panel_ids) -> dict[str, PanelState]:
    """The stored reports of these panels, in one query (under the fabric's lock: the newest committed)."""
    if not panel_ids:
        return {}
    return {x.panel_id: x for x in s.scalars(select(PanelState).where(PanelState.panel_id.in_(sorted(panel_ids)))
                                             .execution_options(populate_existing=True))}


def _derive_ready(s: Session, b: PlanBinding, why_not: str, states: dict[str, PanelState] | None = None) -> bool | None:
    """Set the binding's fabric_ready from the newest report of every panel it needs (under the fabric's
    lock; `states`: those reports when the caller read them already): ready when each last reported applied
    or degraded for its required version or a later one. Records the change as an event (`why_not`: the
    cause when it stops being ready); returns the new value, or None when unchanged."""
    if states is None:
        states = _states(s, b.required_versions)
    ready = all(states.get(p) is not None and states[p].status in APPLIED
                and states[p].applied_version >= b.required_versions[p] for p in b.required_versions)
    if ready == b.fabric_ready:
        return None
    b.fabric_ready = ready
    plan = s.get(Plan, b.plan_id)
    if ready:
        s.add(PlanEvent(plan_id=b.plan_id, status=plan.status, stage="fabric_ready", progress=plan.progress,
                        message="every panel the plan touches has applied its configuration"))
    else:
        s.add(PlanEvent(plan_id=b.plan_id, status=plan.status, stage="fabric", progress=plan.progress,
                        message=f"no longer fabric_ready: {why_not}"))
    notify.changed(s, "plan", b.plan_id)
    return ready


def panel_views(s: Session, fabric_id: str | None = None, limit: int = 100, offset: int = 0) -> tuple[list[dict], int]:
    """(panels ordered by id, how many match): each panel's latest config version against its agent's last
    report, the size of the pending diff, and the active plans whose cross-connects it carries. A constant
    number of queries whatever the number of panels (configs, reports, bindings: one query each)."""
    where = [] if fabric_id is None else [PanelRow.fabric_id == fabric_id]
    total = s.scalar(select(func.count()).select_from(PanelRow).where(*where))
    panels = list(s.scalars(select(PanelRow).where(*where).order_by(PanelRow.id).limit(limit).offset(offset)))
    fabric_ids = {p.fabric_id for p in panels}
    bindings = list(s.scalars(select(PlanBinding).where(PlanBinding.fabric_id.in_(fabric_ids),
                                                        PlanBinding.released.is_(False))))
    ids = [p.id for p in panels]
    configs = latest_configs(s, ids)
    states = {x.panel_id: x for x in s.scalars(select(PanelState).where(PanelState.panel_id.in_(ids)))} if ids else {}
    out = []
    for panel in panels:
        cfg = configs[panel.id]
        st = states.get(panel.id)
        reported = st.connections if st is not None and st.connections is not None else []
        diff = diff_connections(reported, cfg.connections, panel=panel.id)
        applied = st.applied_version if st is not None else 0
        out.append({"id": panel.id, "fabric_id": panel.fabric_id, "kind": panel.kind, "ports": panel.ports,
                    "version": cfg.version, "version_reason": cfg.reason, "version_at": cfg.created_at,
                    "applied_version": applied,
                    "in_sync": applied == cfg.version and (st is None or st.status != "failed"),
                    "status": st.status if st else None, "message": st.message if st else None,
                    "reported_at": st.reported_at if st else None, "cross_connects": len(cfg.connections),
                    "pending_add": len(diff.add), "pending_remove": len(diff.remove),
                    "plans": {b.plan_id: b.required_versions[panel.id] for b in bindings
                              if panel.id in b.required_versions}})
    return out, total


def panel_profile(s: Session, panel: PanelRow) -> dict:
    """The panel's device profile (its kind's facts with the fabric document's overrides)."""
    spec = s.get(FabricRow, panel.fabric_id).spec
    entry = next((p for p in spec["panels"] if p["id"] == panel.id), {})
    return profile_for(panel.kind, entry.get("profile")).to_dict()


def config_view(s: Session, panel_id: str) -> dict | None:
    """The panel's latest config with the diff from what its agent last reported. Each cross-connect names
    the `side` of its hosts' 1x2 switches it serves and whether that side is their `active` plane or their
    `lookahead` plane (a job provisioned ahead); `planes` counts both."""
    panel = s.get(PanelRow, panel_id)
    if panel is None:
        return None
    cfg = latest_config(s, panel_id)
    st = s.get(PanelState, panel_id)
    current = (st.connections if st is not None and st.connections is not None else [])
    diff = diff_connections(current, cfg.connections, panel=panel_id).to_dict()
    sides = active_sides(s, panel.fabric_id)
    conns, planes = [], {ACTIVE: 0, LOOKAHEAD: 0}
    for c in cfg.connections:
        side = c.get("side", 0)
        plane = ACTIVE if side == sides.get(c.get("tx_host"), 0) else LOOKAHEAD
        planes[plane] += 1
        conns.append({**c, "side": side, "plane": plane})
    return {"panel": panel_id, "fabric_id": panel.fabric_id, "kind": panel.kind, "ports": panel.ports,
            "profile": panel_profile(s, panel),
            "version": cfg.version, "digest": config_digest(cfg.connections), "reason": cfg.reason,
            "cross_connects": conns, "planes": planes, "diff": diff,
            "applied_version": st.applied_version if st else 0,
            "reported_version": st.reported_version if st else 0, "reported_status": st.status if st else None}


def ready_estimate_s(s: Session, binding: PlanBinding) -> float:
    """Seconds until every panel the binding needs can hold its version: per panel, the cross-connects to
    change from what its agent last reported to that version's, at its device profile's reconfiguration time
    (services.fabric.devices; 0 when already applied); panels reconfigure in parallel, so the largest."""
    spec = s.get(FabricRow, binding.fabric_id).spec
    overrides = {p["id"]: p.get("profile") for p in spec["panels"]}
    worst = 0.0
    for pid, version in binding.required_versions.items():
        st = s.get(PanelState, pid)
        if st is not None and st.status in APPLIED and st.applied_version >= version:
            continue
        panel = s.get(PanelRow, pid)
        want = s.get(PanelConfig, (pid, version))
        have = st.connections if st is not None and st.connections is not None else []
        changes = diff_connections(have, want.connections if want else [], panel=pid).changes
        worst = max(worst, profile_for(panel.kind, overrides.get(pid)).reconfiguration_time_s(changes))
    return worst


def binding_facts(s: Session, binding: PlanBinding, link_gbps: float) -> dict:
    """What a plan reports about its binding besides hosts and panels: the plane it was provisioned on, when
    its fabric can be ready (`ready_estimate_s`, from the device profiles) and the capital cost of the fabric
    and of the part the plan holds (services.fabric.cost, TopoOpt App. G) at its link bandwidth."""
    from services.fabric.cost import fabric_cost

    fabric = Fabric.from_dict(s.get(FabricRow, binding.fabric_id).spec)
    hosts = binding.assignment["hosts"]
    whole = fabric_cost(fabric, link_gbps).to_dict(len(fabric.hosts))
    mine = fabric_cost(fabric, link_gbps, hosts=hosts).to_dict(len(hosts))
    return {"side": binding.assignment.get("side", 0), "plane": binding.assignment.get("plane", ACTIVE),
            "ready_estimate_s": ready_estimate_s(s, binding), "placement": binding.assignment.get("placement"),
            "cost": {"link_gbps": link_gbps, "fabric_usd": whole["total_usd"], "plan_usd": mine["total_usd"],
                     "items": mine["items"], "fabric_items": whole["items"], "sources": whole["sources"]}}


def running_jobs(s: Session, fabric_id: str) -> list[tuple[str, list[str]]]:
    """(plan id, hosts) of every plan bound to the fabric and not released, by plan id: one query."""
    rows = s.execute(select(PlanBinding.plan_id, PlanBinding.assignment)
                     .where(PlanBinding.fabric_id == fabric_id, PlanBinding.released.is_(False))
                     .order_by(PlanBinding.plan_id))
    return [(plan_id, list(assignment.get("hosts", []))) for plan_id, assignment in rows]


def applied_connections(s: Session, fabric_id: str) -> dict[str, list[tuple[int, int]]]:
    """Panel id -> the (ingress, egress) cross-connects its agent last reported applied (the version of its last
    `applied` or `degraded` report): what a robot would not need to move. Two queries."""
    panels = {p.id: p for p in s.scalars(select(PanelRow).where(PanelRow.fabric_id == fabric_id))}
    states = {st.panel_id: st.applied_version for st in
              s.scalars(select(PanelState).where(PanelState.panel_id.in_(sorted(panels))))}
    wanted = [(pid, v) for pid, v in states.items() if v]
    if not wanted:
        return {}
    rows = s.scalars(select(PanelConfig).where(PanelConfig.panel_id.in_([p for p, _ in wanted])))
    versions = dict(wanted)
    return {c.panel_id: [(int(x["ingress"]), int(x["egress"])) for x in c.connections]
            for c in rows if versions.get(c.panel_id) == c.version}
