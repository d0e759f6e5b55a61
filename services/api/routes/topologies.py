"""/v1/topologies/evaluate: BFB schedule and costs of any topology, model-checked."""
from __future__ import annotations

import time

from fastapi import APIRouter, Depends, HTTPException

from services import planner
from services.synthesis.bfb.lp import ScheduleTooLarge, bfb_allgather, bfb_schedule
from services.synthesis.schedule.ir import Collective
from services.synthesis.schedule.report import schedule_summary
from services.synthesis.schedule.verify import verify
from services.synthesis.topology.catalog import build
from services.synthesis.topology.families import edges as edges_topology

from ..auth import READ
from ..schemas import EvaluateOut, EvaluateRequest

router = APIRouter(tags=["topologies"], dependencies=[Depends(READ)])
EVALUATE_MAX_NODES = 1024
WITH_ARCS_MAX_NODES = 256        # the dashboard draws topologies up to this size


@router.post("/v1/topologies/evaluate", response_model=EvaluateOut,
             responses={422: {"description": "invalid expression or graph"}})
def evaluate(body: EvaluateRequest):
    """BFB schedule and costs of a topology given as an expression or an explicit edge list (model-checked)."""
    try:
        if body.expr is not None:
            topo = build(body.expr)
        else:
            bad = [e for e in body.edges if not (0 <= e[0] < body.nodes and 0 <= e[1] < body.nodes)]
            if bad:
                raise ValueError(f"edge {list(bad[0])} names a node outside 0..{body.nodes - 1}")
            topo = edges_topology(body.nodes, *[tuple(e) for e in body.edges])
        if topo.nodes > EVALUATE_MAX_NODES:
            raise ValueError(f"{topo.nodes} nodes: synchronous evaluation is limited to {EVALUATE_MAX_NODES}; "
                             "submit a plan instead")
        coll = Collective.parse(body.collective)
        t0 = time.perf_counter()
        result = bfb_allgather(topo)
        sched = bfb_schedule(topo, coll, allgather=result.schedule)
        seconds = time.perf_counter() - t0
    except (ValueError, ScheduleTooLarge) as exc:
        field = "expr" if body.expr is not None else "edges"
        raise HTTPException(422, [{"loc": ["body", field], "field": field, "msg": str(exc),
                                   "type": "value_error"}]) from None
    report = verify(sched, topo)
    out = {**schedule_summary(topo, report, seconds, coll), **planner.topology_facts(topo)}
    if body.with_arcs and topo.nodes <= WITH_ARCS_MAX_NODES:
        out.update({k: v for k, v in planner.topology_json(topo).items() if k in ("arcs", "permutation")})
    return EvaluateOut(**{k: out[k] for k in EvaluateOut.model_fields if k in out})
