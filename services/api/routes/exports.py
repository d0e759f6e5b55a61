"""/v1/fabrics/{id}/export: a fabric and its running jobs in the formats cluster schedulers read (Slurm's
topology.yaml for the topology/block plugin, Kubernetes node labels with a Kueue topology); the mapping is in
services.fabric.export and docs/scheduler-formats.md."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy.orm import Session

from services.fabric import Fabric
from services.fabric.export import ExportError, RunningJob, blocks_of, k8s_labels, slurm_topology_yaml
from services.store import fabrics
from services.store.models import FabricRow

from ..auth import READ
from ..deps import get_session
from ..errors import unprocessable
from ..responses import AUTH, COMMON
from ..schemas import ErrorOut

router = APIRouter(tags=["fabric"], responses={**COMMON, **AUTH})
FabricId = Annotated[str, Path(max_length=100)]
EXAMPLE_YAML = ('- topology: "fabricplan-f1"\n  cluster_default: false\n  block:\n    block_sizes:\n      - 8\n'
                '    blocks:\n      - block: "job-p1"\n        nodes: "h00,h01,h02,h03,h04,h05,h06,h07"\n')


@router.get("/v1/fabrics/{fabric_id}/export", dependencies=[Depends(READ)],
            responses={**AUTH, 404: {"model": ErrorOut},
                       200: {"description": "`slurm`: topology.yaml (topology/block plugin) as YAML text; "
                                            "`k8s-labels`: node labels per host and a Kueue Topology (JSON)",
                             "content": {"application/yaml": {"schema": {"type": "string"},
                                                              "example": EXAMPLE_YAML},
                                         "application/json": {"schema": {"type": "object"}}}}})
def export_fabric(fabric_id: FabricId, s: Session = Depends(get_session),
                  format: Literal["slurm", "k8s-labels"] = Query(
                      ..., description="`slurm` (topology.yaml) or `k8s-labels` (node labels + Kueue Topology)")):
    """The fabric's blocks for a cluster scheduler: one block per running plan (its hosts) and one per
    reconfigurable group of free hosts (hosts whose ports land on the same panels, port by port)."""
    row = s.get(FabricRow, fabric_id)
    if row is None:
        raise HTTPException(404, f"fabric {fabric_id} not found")
    fab = Fabric.from_dict(row.spec)
    jobs = [RunningJob(plan_id, tuple(hosts)) for plan_id, hosts in fabrics.running_jobs(s, fabric_id)]
    try:
        blocks = blocks_of(fab, jobs, fabrics.active_sides(s, fabric_id))
        if format == "slurm":
            return PlainTextResponse(slurm_topology_yaml(fab, blocks), media_type="application/yaml")
        return JSONResponse(k8s_labels(fab, blocks))
    except ExportError as e:
        raise unprocessable(["query", "format"], str(e)) from None
