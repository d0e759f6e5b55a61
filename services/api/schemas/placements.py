"""Placement previews (TopoOpt section 3, App. C): where a job of N hosts and degree d would go on a fabric and
how long until its panels could be ready, without reserving anything."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .common import Input

__all__ = ["MAX_PREVIEW_ARCS", "PlacementCandidateOut", "PlacementOut", "PlacementRequest"]

# a preview assigns ports for each candidate in the request; its arcs (nodes x degree x candidates) are bounded
MAX_PREVIEW_ARCS = 65_536


class PlacementRequest(Input):
    nodes: int = Field(ge=2, le=16_384, description="hosts the job needs")
    degree: int = Field(ge=1, le=64, description="ports per host the job's topology uses")
    expr: str | None = Field(default=None, max_length=500, description=(
        "the job's topology expression (moves are counted for it); default genkautz(degree, nodes), a "
        "degree-regular topology of the same size"))
    lookahead: bool = Field(default=False, description="place on the hosts' look-ahead plane")
    policy: Literal["min-reconfiguration", "first-fit"] = "min-reconfiguration"


class PlacementCandidateOut(BaseModel):
    hosts: list[str]
    side: int
    moves: int = Field(description="cross-connects to plug that the panels' agents have not applied")
    moves_by_panel: dict[str, int]
    ready_estimate_s: float = Field(description="seconds until the panels could be ready (device profiles, "
                                                "panels in parallel)")
    largest_free_after: int = Field(description="the most free hosts of one panel group and side afterwards")


class PlacementOut(PlacementCandidateOut):
    policy: str
    expr: str
    candidates_considered: int
    alternatives: list[PlacementCandidateOut]
