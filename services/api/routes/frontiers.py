"""/v1/frontiers: the Pareto frontier for (N, d), cached in the database (paper section 7)."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from services.jobs.stages.frontiers import frontier_entries
from services.synthesis.schedule.ir import Collective
from services.synthesis.search.finder import bounds

from ..auth import READ
from ..responses import AUTH, COMMON
from ..schemas import CollectiveName, FrontierOut

router = APIRouter(tags=["topologies"], dependencies=[Depends(READ)], responses={**COMMON, **AUTH})


@router.get("/v1/frontiers", response_model=FrontierOut)
def get_frontier(nodes: int = Query(ge=2, le=4096), degree: int = Query(ge=1, le=16), bidirectional: bool = False,
                 collective: CollectiveName = "allgather"):
    """The Pareto frontier for (N, d) on the collective's exact costs, cached in the database."""
    entries, cached = frontier_entries(nodes, degree, bidirectional, collective)
    b = bounds(nodes, degree, Collective.parse(collective))
    return FrontierOut(nodes=nodes, degree=degree, bidirectional=bidirectional, collective=collective, cached=cached,
                       bound={"steps": b["steps"], "tau": float(b["tau"]), "tau_exact": str(b["tau"])}, entries=entries)
