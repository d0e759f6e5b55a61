"""POST /v1/fabrics/{id}/placements: where a job of N hosts and degree d would go and how long until it could
start, without reserving anything (services.fabric.placement; plans without `hosts` are placed the same way).
The preview's work is bounded: at most MAX_PREVIEW_ARCS arcs are wired over all candidates."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path
from sqlalchemy.orm import Session

from services.fabric import FabricError
from services.fabric.placement import place
from services.fabric.planes import ACTIVE, LOOKAHEAD
from services.store import fabrics
from services.store.models import FabricRow
from services.fabric.placement import PlacementError
from services.synthesis.topology.catalog import build
from services.synthesis.topology.size import size

from ..bodies import OffLoopRoute
from ..auth import READ
from ..deps import get_session
from ..errors import unprocessable
from ..responses import AUTH, COMMON
from ..schemas import ErrorOut
from ..schemas.placements import MAX_PREVIEW_ARCS, PlacementOut, PlacementRequest

router = APIRouter(route_class=OffLoopRoute, tags=["fabric"], responses={**COMMON, **AUTH})
FabricId = Annotated[str, Path(max_length=100)]


@router.post("/v1/fabrics/{fabric_id}/placements", response_model=PlacementOut, dependencies=[Depends(READ)],
             responses={**AUTH, 404: {"model": ErrorOut}})
def preview_placement(fabric_id: FabricId, body: PlacementRequest, s: Session = Depends(get_session)):
    """The placement policy's answer for a job of `nodes` hosts and `degree` on this fabric now: hosts, robot
    moves from what the panels applied, ready estimate, the largest free set left, and the next best."""
    row = s.get(FabricRow, fabric_id)
    if row is None:
        raise HTTPException(404, f"fabric {fabric_id} not found")
    candidates = MAX_PREVIEW_ARCS // (body.nodes * body.degree)
    if candidates < 1:
        raise unprocessable(["body", "nodes"], f"a preview wires at most {MAX_PREVIEW_ARCS} arcs; {body.nodes} "
                                               f"hosts of degree {body.degree} are placed by a plan")
    expr = body.expr or f"genkautz({body.degree}, {body.nodes})"
    try:
        sized = size(expr)                       # from the parse tree, before anything is built
        if (sized.nodes, sized.degree) != (body.nodes, body.degree):
            raise ValueError(f"{expr} has {sized.nodes} nodes of degree {sized.degree}, not {body.nodes} and "
                             f"{body.degree}")
        topo = build(expr)
    except ValueError as e:
        raise unprocessable(["body", "expr"], str(e)) from None
    state = fabrics.load_state(s, fabric_id)
    try:
        p = place(state, topo, fabrics.applied_connections(s, fabric_id), plane=LOOKAHEAD if body.lookahead else ACTIVE,
                  policy=body.policy, max_candidates=min(32, candidates))
    except PlacementError as e:
        raise unprocessable(["body", "nodes"], str(e), status=409 if e.full else 422) from None
    except FabricError as e:
        raise unprocessable(["body", "expr"], str(e)) from None
    return {**p.to_dict(), "expr": topo.expr}
