"""/v1/fabrics: register hosts, their ports and how each port is cabled to panel/OCS ports (DESIGN 4.5).

A fabric is bounded before anything is built (schemas.FabricLayout / FabricDocument: at most
MAX_FABRIC_HOSTS hosts and MAX_FABRIC_HOST_PORTS host ports, ids of at most 100 characters), and the list
is paginated (limit/offset, X-Total-Count) with summaries; GET /v1/fabrics/{id} has the full document."""
from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Response
from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.fabric import Fabric, FabricError, planes_fabric, shared_panel_fabric
from services.store import fabrics
from services.fabric.cost import FIBER_MEAN_M, fabric_cost
from services.fabric.devices import ProfileError, profile_for
from services.store.models import FabricRow, HostPlane, HostReservation, PanelRow

from ..bodies import OffLoopRoute
from ..auth import READ, WRITE
from ..deps import Limit, Offset, get_session
from ..errors import field_error, unprocessable
from ..responses import AUTH, BODY, COMMON
from ..schemas import ErrorOut, FabricCostOut, FabricDocument, FabricLayout, FabricSummary

router = APIRouter(route_class=OffLoopRoute, tags=["fabric"], responses={**COMMON, **AUTH})
FabricId = Annotated[str, Path(max_length=100)]


def _fabric_summaries(s: Session, rows: list[FabricRow], with_spec: bool) -> list[dict]:
    """Summaries of the fabrics `rows` in a constant number of queries whatever their panels and hosts
    (reservations, panels, their latest config versions, switch positions: one query each)."""
    ids = [r.id for r in rows]
    if not ids:
        return []
    held: dict[str, dict] = {i: {} for i in ids}
    for fid, host, plan in s.execute(select(HostReservation.fabric_id, HostReservation.host_id,
                                            HostReservation.plan_id).where(HostReservation.fabric_id.in_(ids))):
        held[fid][host] = plan
    versions = fabrics.latest_versions(s, ids)
    panels: dict[str, list] = {i: [] for i in ids}
    for p in s.scalars(select(PanelRow).where(PanelRow.fabric_id.in_(ids)).order_by(PanelRow.id)):
        panels[p.fabric_id].append(p)
    planes: dict[str, list] = {i: [] for i in ids}
    for h in s.scalars(select(HostPlane).where(HostPlane.fabric_id.in_(ids)).order_by(HostPlane.host_id)):
        planes[h.fabric_id].append(h)
    out = []
    for row in rows:
        overrides = {p["id"]: p.get("profile") for p in row.spec["panels"]}
        summary = {"id": row.id, "hosts": len(row.spec["hosts"]), "ports_per_host": row.spec["ports_per_host"],
                   "panels": [{"id": p.id, "kind": p.kind, "ports": p.ports, "version": versions.get(p.id, 0),
                               "profile": profile_for(p.kind, overrides.get(p.id)).to_dict()}
                              for p in panels[row.id]],
                   "reserved": held[row.id], "lookahead": "alt" in row.spec["hosts"][0]["ports"][0],
                   "active_sides": {h.host_id: h.active_side for h in planes[row.id] if h.active_side},
                   "lookahead_reserved": {h.host_id: h.lookahead_plan_id for h in planes[row.id]
                                          if h.lookahead_plan_id}}
        out.append({**summary, "spec": row.spec} if with_spec else summary)
    return out


def _fabric_summary(s: Session, row: FabricRow, with_spec: bool) -> dict:
    return _fabric_summaries(s, [row], with_spec)[0]


def _sized(spec) -> None:
    """The panels a layout or document asks for fit their device profiles, checked from the request's numbers
    before anything is built (a 16,384-host shared layout is refused without building 16,384 hosts)."""
    if isinstance(spec, FabricLayout):
        count = spec.hosts if isinstance(spec.hosts, int) else len(spec.hosts)
        ports = count if spec.layout == "planes" else count * spec.ports_per_host * (2 if spec.lookahead else 1)
        profile = spec.profile.model_dump(exclude_none=True) if spec.profile is not None else None
        device = profile_for(spec.kind, profile)
        if ports > device.max_ports:
            raise unprocessable(["body", "hosts"], f"a {spec.layout} layout of {count} hosts"
                                + (f" x {spec.ports_per_host} ports" if spec.layout == "shared" else "")
                                + f" needs panels of {ports} ports but the device profile ({device.model}) has "
                                f"{device.max_ports}: use the planes layout, more panels, or give the profile's "
                                "max_ports of the device you have", "too_many_ports")
        return
    for i, panel in enumerate(spec.panels):
        device = profile_for(panel.kind, panel.profile.model_dump(exclude_none=True) if panel.profile else None)
        if panel.ports > device.max_ports:
            raise unprocessable(["body", "panels", i, "ports"], f"panel {panel.id!r} has {panel.ports} ports but "
                                f"its device profile ({device.model}) has {device.max_ports}: use more panels, or "
                                "give the profile's max_ports of the device you have", "too_many_ports")


def _validated(body: dict):
    """A pydantic model of the body (layout shortcut or full document): 422 naming each bad field."""
    model = FabricLayout if isinstance(body, dict) and "layout" in body else FabricDocument
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise HTTPException(422, [field_error(["body", *e["loc"]], e["msg"], e["type"])
                                  for e in exc.errors(include_url=False)]) from None


@router.post("/v1/fabrics", status_code=201, response_model=FabricSummary, dependencies=[Depends(WRITE)],
             responses={**AUTH, **BODY, 409: {"model": ErrorOut}})
def register_fabric(body: Annotated[dict, Body(openapi_examples={
        "planes": {"value": {"id": "f1", "layout": "planes", "hosts": 32, "ports_per_host": 4}}})],
        s: Session = Depends(get_session)):
    """Register hosts, their ports and the panel port each tx/rx fiber is cabled to: either the full fabric
    document (schemas.FabricDocument: panels and hosts) or a layout shortcut {id, layout: planes|shared,
    hosts, ports_per_host, kind}. 409 when the id or a panel id is taken (also by a registration at the same
    time: exactly one gets 201); 201 only once the fabric is committed (503 with Retry-After otherwise)."""
    spec = _validated(body)
    try:
        _sized(spec)
        if isinstance(spec, FabricLayout):
            make = planes_fabric if spec.layout == "planes" else shared_panel_fabric
            kw = {"panel_prefix": spec.panel_prefix} if spec.panel_prefix else {}
            fab = make(spec.hosts, spec.ports_per_host, kind=spec.kind, fabric_id=spec.id, lookahead=spec.lookahead,
                       **kw)
            if spec.profile is not None:
                profile = spec.profile.model_dump(exclude_none=True)
                fab = Fabric([replace(p, profile=profile) for p in fab.panels], fab.hosts, fab.id)
        else:
            fab = Fabric.from_dict(spec.model_dump(exclude_none=True))
        for i, panel in enumerate(fab.panels):
            device = panel.device()
            if panel.ports > device.max_ports:
                loc = ["body", "hosts"] if isinstance(spec, FabricLayout) else ["body", "panels", i, "ports"]
                raise unprocessable(loc, f"panel {panel.id!r} has {panel.ports} ports but its device profile "
                                    f"({device.model}) has {device.max_ports}: use more panels, or give the "
                                    "profile's max_ports of the device you have", "too_many_ports")
    except (FabricError, ProfileError) as exc:
        raise unprocessable(["body"], str(exc)) from None
    try:
        row = fabrics.register(s, fab)
    except fabrics.FabricConflict as exc:
        hint = ("; panel ids are global: give this layout a panel_prefix of its own"
                if isinstance(spec, FabricLayout) and not spec.panel_prefix and "panel" in str(exc) else "")
        raise HTTPException(409, f"{exc}{hint}") from None
    out = _fabric_summary(s, row, with_spec=True)
    s.commit()                  # answered after the commit: a failed one is a 503 and nothing is stored
    return out


@router.get("/v1/fabrics", response_model=list[FabricSummary], response_model_exclude_none=True,
            dependencies=[Depends(READ)], responses=AUTH)
def list_fabrics(response: Response, limit: Limit = 100, offset: Offset = 0,
                 s: Session = Depends(get_session)):
    """Fabric summaries (without the full document), by id; X-Total-Count is the number of fabrics."""
    response.headers["X-Total-Count"] = str(s.scalar(select(func.count()).select_from(FabricRow)))
    rows = list(s.scalars(select(FabricRow).order_by(FabricRow.id).limit(limit).offset(offset)))
    return _fabric_summaries(s, rows, with_spec=False)


@router.get("/v1/fabrics/{fabric_id}", response_model=FabricSummary, dependencies=[Depends(READ)],
            responses={**AUTH, 404: {"model": ErrorOut}})
def get_fabric(fabric_id: FabricId, s: Session = Depends(get_session)):
    """One fabric: summary, reservations and the full document (`spec`)."""
    row = s.get(FabricRow, fabric_id)
    if row is None:
        raise HTTPException(404, f"fabric {fabric_id} not found")
    return _fabric_summary(s, row, with_spec=True)


@router.get("/v1/fabrics/{fabric_id}/cost", response_model=FabricCostOut, dependencies=[Depends(READ)],
            responses={**AUTH, 404: {"model": ErrorOut}})
def fabric_capital_cost(fabric_id: FabricId, s: Session = Depends(get_session),
                        link_gbps: float = Query(25.0, gt=0, le=1e6, allow_inf_nan=False,
                                                 description="one link's bandwidth (a plan's B / d)"),
                        fiber_m: float = Query(FIBER_MEAN_M, ge=0, le=1e6, allow_inf_nan=False,
                                               description="mean fiber length in metres")):
    """Capital cost of the fabric (TopoOpt App. G, Table 2): NIC ports and transceivers per host port at the
    link bandwidth, panel and OCS ports at their device profiles' prices, 1x2 switches of look-ahead planes,
    fibers at $0.30/m. Each item with its count and unit price; the sources of the prices."""
    row = s.get(FabricRow, fabric_id)
    if row is None:
        raise HTTPException(404, f"fabric {fabric_id} not found")
    fab = Fabric.from_dict(row.spec)
    return fabric_cost(fab, link_gbps, fiber_m=fiber_m).to_dict(len(fab.hosts))
