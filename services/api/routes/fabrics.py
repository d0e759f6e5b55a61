"""/v1/fabrics: register hosts, their ports and how each port is cabled to panel/OCS ports (DESIGN 4.5)."""
from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Query
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.fabric import Fabric, FabricError, planes_fabric, shared_panel_fabric
from services.store import fabrics
from services.store.models import FabricRow, HostReservation, PanelRow

from ..auth import READ, WRITE
from ..deps import get_session
from ..responses import AUTH
from ..schemas import ErrorOut, FabricLayout

router = APIRouter(tags=["fabric"])



def _fabric_summary(s: Session, row: FabricRow, spec: bool = True) -> dict:
    held = {r.host_id: r.plan_id for r in s.scalars(select(HostReservation).where(HostReservation.fabric_id == row.id))}
    panels = [{"id": p.id, "kind": p.kind, "ports": p.ports,
               "version": fabrics.latest_config(s, p.id).version}
              for p in s.scalars(select(PanelRow).where(PanelRow.fabric_id == row.id).order_by(PanelRow.id))]
    return {"id": row.id, "hosts": len(row.spec["hosts"]), "ports_per_host": row.spec["ports_per_host"],
            "panels": panels, "reserved": held, "spec": row.spec if spec else None}


@router.post("/v1/fabrics", status_code=201, dependencies=[Depends(WRITE)],
             responses={**AUTH, 409: {"model": ErrorOut}, 422: {"description": "invalid fabric"}})
def register_fabric(body: dict, s: Session = Depends(get_session)):
    """Register hosts, their ports and the panel port each tx/rx fiber is cabled to: either the full fabric
    document (services.fabric.Fabric JSON) or a layout shortcut {id, layout: planes|shared, hosts,
    ports_per_host, kind}."""
    try:
        if "layout" in body:
            lay = FabricLayout.model_validate(body)
            make = planes_fabric if lay.layout == "planes" else shared_panel_fabric
            kw = {"panel_prefix": lay.panel_prefix} if lay.panel_prefix and lay.layout == "planes" else {}
            fab = make(lay.hosts, lay.ports_per_host, kind=lay.kind, fabric_id=lay.id, **kw)
        else:
            fab = Fabric.from_dict(body)
    except (FabricError, ValueError, TypeError, KeyError) as exc:
        msg = str(exc) if not hasattr(exc, "errors") else "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise HTTPException(422, [{"loc": ["body"], "field": "", "msg": msg, "type": "value_error"}]) from None
    try:
        row = fabrics.register(s, fab)
    except fabrics.FabricConflict as exc:
        raise HTTPException(409, str(exc)) from None
    s.flush()
    return _fabric_summary(s, row)


SPEC = Query(True, description="include the full fabric document (every host's cabling); false: null")


@router.get("/v1/fabrics", dependencies=[Depends(READ)])
def list_fabrics(spec: bool = SPEC, s: Session = Depends(get_session)):
    return [_fabric_summary(s, r, spec) for r in s.scalars(select(FabricRow).order_by(FabricRow.id))]


@router.get("/v1/fabrics/{fabric_id}", dependencies=[Depends(READ)], responses={404: {"model": ErrorOut}})
def get_fabric(fabric_id: str, spec: bool = SPEC, s: Session = Depends(get_session)):
    row = s.get(FabricRow, fabric_id)
    if row is None:
        raise HTTPException(404, f"fabric {fabric_id} not found")
    return _fabric_summary(s, row, spec)
