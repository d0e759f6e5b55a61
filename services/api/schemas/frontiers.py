"""Frontier bodies (GET /v1/frontiers): the Pareto-efficient topologies of (N, d) with their costs.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


from .common import CollectiveCost, CollectiveName
from .topologies import CandidateOut

__all__ = ["FrontierEntry", "FrontierOut"]


class FrontierEntry(CandidateOut):
    collective: CollectiveName = Field(default="allgather", description="whose cost steps and tau are")
    family: str
    schedule: Literal["bfb", "construction"] = Field(default="bfb", description="how the expression's top level "
                                                     "is built: BFB on the whole graph or the expansion's definition")
    reverse_symmetric: bool | None = Field(default=None, description="isomorphic to its transpose (Definition 6): "
                                           "reduce-scatter then costs what allgather does")
    costs: dict[CollectiveName, CollectiveCost] | None = Field(default=None, description="every collective's cost")
    alltoall_f: float | None = Field(default=None, description="all-to-all throughput f (MCF, LP (3)) when "
                                                               "the workload has an all-to-all share")


class FrontierOut(BaseModel):
    nodes: int
    degree: int
    bidirectional: bool
    collective: CollectiveName = "allgather"
    cached: bool
    bound: dict
    entries: list[FrontierEntry]
