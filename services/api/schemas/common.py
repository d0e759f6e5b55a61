"""What every request and response body shares (DESIGN section 7): the strict `Input` base, the units'
bounds (bytes, weights, bandwidth, latency), names (collectives, runtimes, identifiers), errors, health and
statistics.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


__all__ = ["Bytes", "CollectiveCost", "CollectiveCostOut", "CollectiveName", "ErrorOut", "FieldError", "HealthOut",
           "HostId", "INT32_MAX", "Ident", "Input", "MAX_ALPHA_US", "MAX_BYTES", "MAX_GBPS", "MAX_PANEL_PORTS",
           "MAX_WEIGHT", "MIN_GBPS", "MIN_LINK_GBPS", "PlanStatus", "Progress", "ReadyOut", "RuntimeName",
           "ScheduleCollective", "StatsOut", "ValidationErrorOut", "Weight"]

CollectiveName = Literal["allgather", "reducescatter", "allreduce"]
ScheduleCollective = Literal["allgather", "reducescatter", "allreduce", "alltoall"]
PlanStatus = Literal["queued", "running", "done", "failed"]
MAX_BYTES = 1 << 50                 # 1 PiB: every time computed from it stays a finite float
MAX_WEIGHT = 1e6
INT32_MAX = (1 << 31) - 1           # integer columns
MAX_PANEL_PORTS = 1 << 17
MIN_GBPS = 1e-3                     # 1 Mbit/s: a host's egress or one link; below it no time is a finite float
MIN_LINK_GBPS = MIN_GBPS            # one link's own bandwidth (an edge that prices its link)
MAX_GBPS = 1e6                      # 1 Pbit/s
MAX_ALPHA_US = 1e6                  # 1 s per step
Bytes = Annotated[int, Field(ge=1, le=MAX_BYTES)]
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT)]
HostId = Annotated[str, Field(min_length=1, max_length=100)]
RuntimeName = Literal["executor", "rccl", "legacy", "oneccl"]


class Input(BaseModel):
    """A request body: unknown fields are errors, numbers are finite (no NaN or Infinity), and types are strict
    (pydantic strict mode): `true` is not the number 1, "16" is not 16, 1.0 is not an integer."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


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
    panels_out_of_sync: int = Field(description="panels whose agent has not applied the latest version")


class ErrorOut(BaseModel):
    detail: str


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="where: body, query, path or header, then the field's path")
    field: str = Field(description="the field's path joined by dots ('' for the whole body)")
    msg: str
    type: str


class ValidationErrorOut(BaseModel):
    """Every 400 and 422 has this shape."""

    detail: list[FieldError]


Ident = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
