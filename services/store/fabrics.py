"""Fabric persistence and the controller protocol (DESIGN 4.5-4.7), over services.fabric.

Each operation rebuilds a FabricState from the rows (fabric spec + active bindings), applies the change and
writes rows back, inside the caller's transaction. Reserve/release on one fabric are serialised by a row
lock on the fabric (PostgreSQL) or SQLite's single writer, and the host_reservations primary key makes a
shared host impossible even then. Panel configs are versioned: a new version is written only when a panel's
desired cross-connects change (by digest).
"""
from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from services.fabric import Fabric, FabricState, diff_connections
from services.fabric.crossconnect import config_digest

from . import notify
from .models import (FabricRow, HostReservation, PanelConfig, PanelRow, PanelState, Plan, PlanBinding, PlanEvent,
                     utcnow)


class FabricConflict(Exception):
    """The fabric id or one of its panel ids is already registered."""


def register(s: Session, fabric: Fabric) -> FabricRow:
    if s.get(FabricRow, fabric.id) is not None:
        raise FabricConflict(f"fabric {fabric.id!r} already exists")
    taken = [p.id for p in fabric.panels if s.get(PanelRow, p.id) is not None]
    if taken:
        raise FabricConflict(f"panel ids {taken} belong to another fabric (panel ids are global)")
    row = FabricRow(id=fabric.id, spec=fabric.to_dict())
    s.add(row)
    s.flush()
    for p in fabric.panels:
        s.add(PanelRow(id=p.id, fabric_id=fabric.id, kind=p.kind, ports=p.ports))
    s.flush()
    for p in fabric.panels:
        s.add(PanelConfig(panel_id=p.id, version=1, connections=[], reason="registered (no cross-connects)"))
    return row


def _lock(s: Session, fabric_id: str) -> FabricRow | None:
    return s.scalar(select(FabricRow).where(FabricRow.id == fabric_id).with_for_update())


def load_state(s: Session, fabric_id: str) -> FabricState:
    row = s.get(FabricRow, fabric_id)
    bindings = list(s.scalars(select(PlanBinding).where(PlanBinding.fabric_id == fabric_id,
                                                        PlanBinding.released.is_(False))))
    return FabricState.from_dict({"fabric": row.spec,
                                  "reservations": [{"plan_id": b.plan_id, "hosts": b.assignment["hosts"]}
                                                   for b in bindings],
                                  "assignments": [b.assignment for b in bindings]})


def latest_config(s: Session, panel_id: str) -> PanelConfig | None:
    return s.scalar(select(PanelConfig).where(PanelConfig.panel_id == panel_id)
                    .order_by(PanelConfig.version.desc()).limit(1))


def _write_configs(s: Session, state: FabricState, panels, reason: str) -> dict[str, int]:
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


def bind_plan(s: Session, plan_id: str, fabric_id: str, topology, hosts: list[str] | None) -> PlanBinding:
    """Reserve hosts, assign ports, write the panels' new config versions (raises FabricError subclasses
    with a reason a person can act on)."""
    existing = s.get(PlanBinding, plan_id)
    if existing is not None and not existing.released:
        return existing                                   # a redelivered task: already bound
    if _lock(s, fabric_id) is None:
        from services.fabric import FabricError

        raise FabricError(f"fabric {fabric_id!r} is not registered")
    state = load_state(s, fabric_id)
    asg = state.bind(plan_id, topology, hosts)
    for h in asg.hosts:
        s.add(HostReservation(fabric_id=fabric_id, host_id=h, plan_id=plan_id))
    s.flush()                                              # the primary key rejects a shared host here
    panels = state.panels_of(plan_id)
    versions = _write_configs(s, state, panels, f"plan {plan_id} bound")
    binding = PlanBinding(plan_id=plan_id, fabric_id=fabric_id, assignment=asg.to_dict(),
                          required_versions={p: versions[p] for p in panels})
    s.merge(binding)
    s.add(PlanEvent(plan_id=plan_id, status=s.get(Plan, plan_id).status, stage="fabric",
                    progress=s.get(Plan, plan_id).progress,
                    message=f"hosts {asg.hosts[0]}..{asg.hosts[-1]} reserved on {fabric_id}; panels "
                            + ", ".join(f"{p} v{v}" for p, v in sorted(versions.items()))))
    return s.get(PlanBinding, plan_id)


def release_plan(s: Session, plan_id: str) -> PlanBinding | None:
    """Free the plan's hosts and ports; its cross-connects leave the panels' next config versions."""
    b = s.get(PlanBinding, plan_id)
    if b is None or b.released:
        return b
    _lock(s, b.fabric_id)
    touched = list(b.required_versions)
    b.released = True
    s.execute(delete(HostReservation).where(HostReservation.plan_id == plan_id))
    s.flush()
    state = load_state(s, b.fabric_id)
    _write_configs(s, state, touched, f"plan {plan_id} released")
    plan = s.get(Plan, plan_id)
    s.add(PlanEvent(plan_id=plan_id, status=plan.status, stage="fabric", progress=plan.progress,
                    message=f"released its hosts on {b.fabric_id}"))
    notify.changed(s, "plan", plan_id)
    return b


def report_state(s: Session, panel_id: str, version: int, status: str, message: str | None,
                 connections: list | None) -> tuple[list[str], list[str]]:
    """Record an agent's report (validated by the caller: not stale, connections in range, one-to-one, and
    equal to version `version`'s when `status` is applied). Readiness follows the latest report: a plan is
    fabric_ready while every panel it touches last reported `applied` for its version or a later one.
    Returns (plans that became ready, plans whose readiness changed either way)."""
    st = s.get(PanelState, panel_id)
    if st is None:
        st = PanelState(panel_id=panel_id, applied_version=0, reported_version=0, status=status)
        s.add(st)
    st.status, st.message, st.reported_version, st.reported_at = status, message, version, utcnow()
    if status == "applied":
        st.applied_version = version
    if connections is not None:
        st.connections = connections
    s.flush()
    notify.changed(s, "panel", panel_id)
    became_ready, changed = [], []
    panel = s.get(PanelRow, panel_id)
    for b in s.scalars(select(PlanBinding).where(PlanBinding.fabric_id == panel.fabric_id,
                                                  PlanBinding.released.is_(False))):
        if panel_id not in b.required_versions:
            continue
        states = {p: s.get(PanelState, p) for p in b.required_versions}
        ready = all(x is not None and x.status == "applied" and x.applied_version >= b.required_versions[p]
                    for p, x in states.items())
        if ready == b.fabric_ready:
            continue
        b.fabric_ready = ready
        plan = s.get(Plan, b.plan_id)
        if ready:
            s.add(PlanEvent(plan_id=b.plan_id, status=plan.status, stage="fabric_ready", progress=plan.progress,
                            message="every panel the plan touches has applied its configuration"))
            became_ready.append(b.plan_id)
        else:
            s.add(PlanEvent(plan_id=b.plan_id, status=plan.status, stage="fabric", progress=plan.progress,
                            message=f"no longer fabric_ready: panel {panel_id} reported {status} for version "
                                    f"{version}" + (f" ({message})" if message else "")))
        notify.changed(s, "plan", b.plan_id)
        changed.append(b.plan_id)
    return became_ready, changed


def panel_views(s: Session, fabric_id: str | None = None, limit: int = 100, offset: int = 0) -> tuple[list[dict], int]:
    """(panels ordered by id, how many match): each panel's latest config version against its agent's last
    report, the size of the pending diff, and the active plans whose cross-connects it carries."""
    where = [] if fabric_id is None else [PanelRow.fabric_id == fabric_id]
    total = s.scalar(select(func.count()).select_from(PanelRow).where(*where))
    panels = list(s.scalars(select(PanelRow).where(*where).order_by(PanelRow.id).limit(limit).offset(offset)))
    fabric_ids = {p.fabric_id for p in panels}
    bindings = list(s.scalars(select(PlanBinding).where(PlanBinding.fabric_id.in_(fabric_ids),
                                                        PlanBinding.released.is_(False))))
    out = []
    for panel in panels:
        cfg = latest_config(s, panel.id)
        st = s.get(PanelState, panel.id)
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


def config_view(s: Session, panel_id: str) -> dict | None:
    """The panel's latest config with the diff from what its agent last reported."""
    panel = s.get(PanelRow, panel_id)
    if panel is None:
        return None
    cfg = latest_config(s, panel_id)
    st = s.get(PanelState, panel_id)
    current = (st.connections if st is not None and st.connections is not None else [])
    diff = diff_connections(current, cfg.connections, panel=panel_id).to_dict()
    return {"panel": panel_id, "fabric_id": panel.fabric_id, "kind": panel.kind, "ports": panel.ports,
            "version": cfg.version, "digest": config_digest(cfg.connections), "reason": cfg.reason,
            "cross_connects": cfg.connections, "diff": diff,
            "applied_version": st.applied_version if st else 0,
            "reported_version": st.reported_version if st else 0, "reported_status": st.status if st else None}
