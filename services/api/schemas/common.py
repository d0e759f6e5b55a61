"""What every request and response body shares (DESIGN section 7): the strict `Input` base, the units'
bounds and the names (collectives, runtimes; services.jobs.requests.bounds, where the jobs read requests back
with them), identifiers, errors, health and statistics.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from services.jobs.requests.bounds import (MAX_ALPHA_US, MAX_BYTES, MAX_GBPS, MAX_WEIGHT, MIN_GBPS, MIN_LINK_GBPS,
                                           Bytes, CollectiveName, HostId, Input, RuntimeName, ScheduleCollective,
                                           Weight)

__all__ = ["Bytes", "CollectiveCost", "CollectiveCostOut", "CollectiveName", "ErrorOut", "FieldError", "HealthOut", "Problem",
           "HostId", "INT32_MAX", "Ident", "Input", "MAX_ALPHA_US", "MAX_BYTES", "MAX_GBPS", "MAX_PANEL_PORTS",
           "MAX_WEIGHT", "MIN_GBPS", "MIN_LINK_GBPS", "PlanStatus", "Progress", "ReadyOut", "RuntimeName",
           "ScheduleCollective", "StatsOut", "ValidationErrorOut", "Weight"]

PlanStatus = Literal["queued", "running", "done", "failed"]
INT32_MAX = (1 << 31) - 1           # integer columns
MAX_PANEL_PORTS = 1 << 17


class CollectiveCost(BaseModel):
    """T_L = steps * alpha and T_B = tau * M/B of one collective's schedule."""

    steps: int
    tau: float
    tau_exact: str


class CollectiveCostOut(BaseModel):
    """(steps, tau) measured from a verified schedule: T = steps * alpha + tau * S/B."""

    steps: int
    tau: float
    tau_exact: str


class Progress(BaseModel):
    fraction: float = Field(description="the share of the expected running time spent: stages weighted by their "
                            "measured costs in N and the number of files compiled")
    stage: str
    eta_s: float | None = Field(default=None, description="while running: seconds left, elapsed (1 - p) / p")


class HealthOut(BaseModel):
    status: Literal["ok"]
    api_keys_required: bool = Field(description="clients (the dashboard) ask for a key before they call")


class ReadyOut(BaseModel):
    status: Literal["ready", "not ready"]
    checks: dict[str, str] = Field(description="database and broker: ok, embedded, or error: <exception>")


class StatsOut(BaseModel):
    plans: dict[str, int] = Field(description="plans by status (also the fabricplan_plans gauge)")
    jobs: dict[str, dict[str, int]] = Field(description="unfinished jobs by kind (plan, evaluation, revision, "
                                            "compile) and status (queued, running); also the fabricplan_jobs gauge")
    queue_depth: int = Field(description="jobs of every kind accepted and not yet started by a worker (status "
                             "queued)")
    fabrics: int
    panels: int
    panels_out_of_sync: int = Field(description="panels whose agent has not applied the latest version "
                                    "(not counted: a panel with no cross-connects to hold that holds none)")


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="where: body, query, path or header, then the field's path")
    field: str = Field(description="the field's path joined by dots ('' for the whole body)")
    msg: str
    type: str


class Problem(BaseModel):
    """Every error (RFC 9457 problem details, served as application/problem+json; services.api.errors)."""

    type: str = Field(description="what kind of problem: urn:fabricplan:problem:<kind> (a field error's type, or "
                      "the status's kind: not-found, conflict, too-many-jobs, unavailable, ...)")
    title: str = Field(description="the HTTP status's phrase")
    status: int = Field(description="the HTTP status code")
    detail: str = Field(description="what happened, for a person")
    instance: str | None = Field(default=None, description="the request's path")
    field: str | None = Field(default=None, description="the field at fault (the first of `errors`), dotted")
    reason: str = Field(description="why: the first field error's message, else the detail")
    errors: list[FieldError] = Field(default_factory=list, description="every field at fault (400, 413, 415, 422)")


ErrorOut = ValidationErrorOut = Problem        # the names the routes' response declarations use


Ident = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
