"""/v1/topologies/evaluate: BFB schedule and costs of any topology, model-checked - run by a worker.

The request is sized from its expression tree and refused at once when too large (422); the graph is built
only to check it is a valid topology. The BFB solve and the model check run in a worker under the task
limits: the POST answers 200 with the result when it is ready within `wait` seconds (or was computed
before: the same request is the same evaluation), 202 with the evaluation's URL otherwise, and 422 with the
reason when the evaluation failed.
"""
from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from services.jobs.requests import evaluation_request

from .. import evaluation_queue
from ..bodies import OffLoopRoute
from ..auth import READ, Principal
from ..errors import unprocessable
from ..notify import until
from ..responses import AUTH, BODY, COMMON, TOO_MANY
from ..schemas import ErrorOut, EvaluateOut, EvaluateRequest, EvaluationAccepted, EvaluationOut

router = APIRouter(route_class=OffLoopRoute, tags=["topologies"], dependencies=[Depends(READ)], responses={**COMMON, **AUTH})
EVALUATE_WAIT_MAX_S = 60.0


def _submit(settings, body: EvaluateRequest, principal: Principal) -> tuple[dict, bool]:
    edges = None if body.edges is None else [e.model_dump() for e in body.edges]
    links = {"alpha_us": body.alpha_us, "bandwidth_gbps": body.bandwidth_gbps, "size_bytes": float(body.size_bytes)}
    try:
        evaluation_id, request = evaluation_request.prepare(body.expr, body.nodes, edges, body.collective, links)
    except evaluation_request.EdgeError as exc:
        raise unprocessable(["body", *exc.loc], str(exc)) from None
    except ValueError as exc:
        raise unprocessable(["body", "expr" if body.expr is not None else "edges"], str(exc)) from None
    return evaluation_queue.queue(settings, evaluation_id, request, principal)


def _url(request: Request, evaluation_id: str) -> str:
    return f"{str(request.base_url).rstrip('/')}/v1/topologies/evaluations/{evaluation_id}"


def _result(ev: dict, url: str, with_arcs: bool) -> EvaluateOut:
    """A done evaluation's result as the POST answers it (its id and URL; arcs only `with_arcs`)."""
    drop = () if with_arcs else ("arcs", "permutation")
    return EvaluateOut(id=ev["id"], url=url, **{k: ev["result"][k] for k in EvaluateOut.model_fields
                                                if k in ev["result"] and k not in drop and k not in ("id", "url")})


def _answer(ev: dict, request: Request, with_arcs: bool):
    url = _url(request, ev["id"])
    if ev["status"] == "done":
        return _result(ev, url, with_arcs)
    if ev["status"] == "failed":
        raise unprocessable(["body"], ev["reason"], "evaluation_failed")
    return JSONResponse(EvaluationAccepted(id=ev["id"], status=ev["status"], url=url).model_dump(),
                        status_code=202, headers={"Location": url, "Retry-After": "1"})


@router.post("/v1/topologies/evaluate", response_model=EvaluateOut,
             responses={**AUTH, **BODY, **TOO_MANY, 202: {"model": EvaluationAccepted, "description": "still "
                                                                         "running: poll the evaluation's URL"}})
async def evaluate(body: EvaluateRequest, request: Request,
                   wait: float = Query(10.0, ge=0, le=EVALUATE_WAIT_MAX_S, allow_inf_nan=False,
                                       description="seconds to wait for the result before answering 202"),
                   principal: Principal = Depends(READ)):
    """BFB schedule and costs of a topology given as an expression or an explicit edge list (model-checked)."""
    url = request.app.state.settings.sqlalchemy_url
    hub = request.app.state.hub
    ev, created = await run_in_threadpool(_submit, request.app.state.settings, body, principal)
    if created:
        request.app.state.dispatcher.wake()
    deadline = time.monotonic() + wait
    while ev["status"] not in ("done", "failed") and time.monotonic() < deadline:
        with hub.subscription("evaluation", ev["id"]) as changed:
            ev = await run_in_threadpool(evaluation_queue.load, url, ev["id"])
            if ev["status"] in ("done", "failed"):
                break
            await until(changed, min(deadline - time.monotonic(), 5.0))
    return _answer(ev, request, body.with_arcs)


@router.get("/v1/topologies/evaluations/{evaluation_id}", response_model=EvaluationOut,
            responses={**AUTH, 404: {"model": ErrorOut}})
async def get_evaluation(evaluation_id: Annotated[str, Path(max_length=64)], request: Request, response: Response,
                         with_arcs: bool = Query(False, description="also return the arcs with their Konig "
                                                 "permutation (as the POST's with_arcs)")):
    """An evaluation's status, its id and URL, and its result (the same fields as the POST answers: id, url,
    arcs only with `with_arcs`) or the reason it failed."""
    ev = await run_in_threadpool(evaluation_queue.load, request.app.state.settings.sqlalchemy_url, evaluation_id)
    if ev is None or ev["kind"] != "topology":          # a cluster simulation is read at /v1/cluster/simulations
        raise HTTPException(404, f"evaluation {evaluation_id} not found")
    if ev["status"] in ("queued", "running"):
        response.headers["Retry-After"] = "1"
    url = _url(request, ev["id"])
    result = _result(ev, url, with_arcs) if ev["status"] == "done" and ev.get("result") else None
    return EvaluationOut(**{**ev, "url": url, "result": result})
