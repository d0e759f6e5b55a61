"""/v1/cluster/simulations: a job mix on a shared cluster, direct-connect against switched fabrics (TopoOpt section
5.6; services.synthesis.evaluate.cluster). The simulation runs in a worker (as an evaluation of kind `cluster`):
the POST answers 202 with the simulation's URL (or 200 with the stored result of the same request), the GET
its status and, when done, its rows."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from services.jobs.requests import cluster_request
from services.jobs.requests.cluster_request import ClusterSimulationRequest

from .. import evaluation_queue
from ..bodies import OffLoopRoute
from ..auth import READ, Principal
from ..errors import unprocessable
from ..responses import AUTH, BODY, COMMON, TOO_MANY
from ..schemas import ErrorOut

router = APIRouter(route_class=OffLoopRoute, tags=["cluster"], dependencies=[Depends(READ)], responses={**COMMON, **AUTH})


class ClusterSimulationOut(BaseModel):
    id: str
    url: str
    status: str = Field(description="queued, running, done or failed")
    reason: str | None = None
    results: list[dict] | None = Field(default=None, description="one row per number of active jobs and fabric: "
                                       "jobs, fabric, load, mean_iteration_s, p99_iteration_s, mean_completion_s, "
                                       "utilisation, reconfiguration_s, fragmentation_idle_hosts, "
                                       "host_bandwidth_gbps, per_model_iteration_s")


def _submit(settings, body: ClusterSimulationRequest, principal: Principal) -> tuple[dict, bool]:
    try:
        sim_id, request = cluster_request.prepare(body)
    except ValueError as exc:
        raise unprocessable(["body"], str(exc)) from None
    return evaluation_queue.queue(settings, sim_id, request, principal)


def _out(ev: dict, request: Request) -> ClusterSimulationOut:
    url = f"{str(request.base_url).rstrip('/')}/v1/cluster/simulations/{ev['id']}"
    return ClusterSimulationOut(id=ev["id"], url=url, status=ev["status"], reason=ev["reason"],
                                results=(ev["result"] or {}).get("results"))


@router.post("/v1/cluster/simulations", response_model=ClusterSimulationOut,
             responses={**AUTH, **BODY, **TOO_MANY, 202: {"model": ClusterSimulationOut,
                                                          "description": "queued or running: poll its url"}})
async def simulate(body: ClusterSimulationRequest, request: Request, principal: Principal = Depends(READ)):
    """Queue a shared-cluster simulation (or answer the stored one of the same request)."""
    ev, created = await run_in_threadpool(_submit, request.app.state.settings, body, principal)
    if created:
        request.app.state.dispatcher.wake()
    out = _out(ev, request)
    if ev["status"] == "done":
        return out
    return JSONResponse(out.model_dump(), status_code=202, headers={"Location": out.url, "Retry-After": "1"})


@router.get("/v1/cluster/simulations/{simulation_id}", response_model=ClusterSimulationOut,
            responses={**AUTH, 404: {"model": ErrorOut}})
async def get_simulation(simulation_id: Annotated[str, Path(max_length=64)], request: Request):
    """A simulation's status, and its rows when done or the reason it failed."""
    ev = await run_in_threadpool(evaluation_queue.load, request.app.state.settings.sqlalchemy_url, simulation_id)
    if ev is None or ev["kind"] != cluster_request.KIND:
        raise HTTPException(404, f"cluster simulation {simulation_id} not found")
    return _out(ev, request)
