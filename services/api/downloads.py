"""How the plan and revision routes declare their downloads and path parameters in OpenAPI, so generated
clients get enums and bytes (services.api.openapi_doc): the collective of a schedule path, the `format`
enums, and 200 responses that list application/octet-stream first (responses.download)."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path

from services.compiler.runtimes.names import Format
from services.synthesis.schedule.ir import Collective

from .responses import download
from .schemas import ErrorOut

__all__ = ["CONFLICT", "NOT_MODIFIED", "ScheduleCollectivePath", "RevisionCollectivePath", "ScheduleFormat",
           "TopologyFormat", "SCHEDULE_DOWNLOAD", "TOPOLOGY_DOWNLOAD", "XML_FORMATS"]

CONFLICT = {409: {"model": ErrorOut, "description": "the plan is not done yet (or has no such stored artifact)"}}
NOT_MODIFIED = {304: {"description": "unchanged (If-None-Match)"}}
# the collective of a schedule path: the enum documents the names (the aliases Collective.parse reads are
# accepted too); an unknown one is 404, as for any path that does not exist
_COLLECTIVES = [c.value for c in Collective]        # allgather, reducescatter, allreduce, alltoall
ScheduleCollectivePath = Annotated[str, Path(json_schema_extra={"enum": _COLLECTIVES},
                                             description="allgather, reducescatter, allreduce or alltoall")]
RevisionCollectivePath = Annotated[str, Path(json_schema_extra={"enum": _COLLECTIVES},
                                             description="allgather, reducescatter, allreduce or alltoall (a "
                                                         "revision re-plans the all-to-all when the workload has one)")]
ScheduleFormat = Literal[("json", "npz", *(f.value for f in Format))]         # json, npz, msccl, oneccl
XML_FORMATS = tuple(f.value for f in Format)
TopologyFormat = Literal["json", "graphml", "node-link"]
SCHEDULE_DOWNLOAD = download("the schedule: JSON (format=json), the npz IR blob (application/octet-stream) or "
                             "MSCCL / oneCCL XML (application/xml)", "application/xml", "application/json")
TOPOLOGY_DOWNLOAD = download("the topology as JSON, GraphML, or networkx node-link JSON (format=node-link: networkx.node_link_graph reads it)", "application/graphml+xml", "application/json")


def node_link_render(content: bytes) -> bytes:
    """The stored topology JSON rendered as networkx node-link data (format=node-link)."""
    import json

    from services.synthesis.topology.graphml import topology_node_link

    return json.dumps(topology_node_link(json.loads(content))).encode()
