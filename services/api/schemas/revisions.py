"""Revision bodies (DESIGN 4.9): a failure report, the revision it queues, and a revision in full with its
schedules, compiled files, all-to-all and failure cost.
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


from .common import Input, PlanStatus, Progress
from .plans import AllToAllOut, AllToAllTimes

__all__ = ["FailureReport", "LinkRef", "RevisionAccepted", "RevisionAllToAllOut", "RevisionAllToAllTimes",
           "RevisionOut", "RevisionSummary"]


class RevisionAllToAllTimes(AllToAllTimes):
    schedule_us: float | None = Field(default=None, description="steps * alpha + tau * D/B of the verified "
                                      "schedule (none when the revision has no schedule: approximate)")
    mcf_bound_us: float = Field(description="(D/N) / (f B/d): the MCF throughput's bandwidth-only time (approximate:"
                                " at the bracket's lower end f = mcf_lower, the time charged)")
    mcf_bound_low_us: float | None = Field(default=None, description="approximate: the same at the bracket's upper "
                                           "end f = mcf_upper")


class RevisionAllToAllOut(AllToAllOut):
    """A revision's all-to-all on its degraded topology: the schedule as the plan builds it (built), or, when its
    LP is beyond the library's limits, the LP (3) throughput bracket charged at its lower end (approximate)."""

    status: Literal["built", "refused", "approximate"]
    mcf_lower: float | None = Field(default=None, description="approximate: the certified bracket of LP (3)'s f")
    mcf_upper: float | None = None
    mcf_exact: bool | None = None
    mcf_method: str | None = Field(default=None, description="approximate: how f was computed (lp, lp-symmetric, "
                                   "colgen)")
    times_us: dict[str, RevisionAllToAllTimes] = Field(default_factory=dict, description="per all-to-all size (bytes "
                                                       "per node): the schedule's time and the MCF bound")


class LinkRef(Input):
    arc: str = Field(max_length=32, pattern=r"^\s*\d{1,7}\s*>\s*\d{1,7}\s*$", description="tail>head, an arc of "
                     "the plan's topology")
    lane: int | None = Field(default=None, strict=True, ge=0, le=63, description="one of parallel arcs (default: "
                             "the highest not failed yet)")


class FailureReport(Input):
    model_config = ConfigDict(json_schema_extra={"examples": [{"links": [{"arc": "0>1"}], "repair": True}]})

    links: list[LinkRef] = Field(min_length=1, max_length=1024, description="the failed links")
    repair: bool = Field(default=True, description="re-patch around the failure when the hosts have spare ports "
                         "on a panel or OCS; the plan returns to its full topology once the panels apply it")
    message: str | None = Field(default=None, max_length=2000)


class RevisionAccepted(BaseModel):
    plan_id: str
    number: int
    status: str
    url: str


class RevisionSummary(BaseModel):
    number: int = Field(description="0: the plan as made; each failure report or applied repair adds one")
    kind: Literal["original", "failure", "restored"]
    status: PlanStatus
    current: bool = Field(description="the highest-numbered done revision: what the scheduler should run")
    created_at: datetime
    expr: str | None = Field(description="the revision's topology")
    failed: list[str] = Field(description="links failed in this revision (tail>head)")
    workload_slowdown: float | None = Field(default=None, description="failure revisions: the workload's "
                                            "predicted time against revision 0's; null for the original and for a "
                                            "restored revision (no failure: it runs at revision 0's time)")
    restores: int | None = Field(default=None, description="a restored revision: the failure revision whose "
                                 "repair it completes (back on the full topology); null otherwise")
    url: str


class RevisionOut(RevisionSummary):
    plan_id: str
    progress: Progress
    reason: str | None = None
    updated_at: datetime
    cause: dict | None = Field(description="what made it: source (scheduler, panel, repair), the links reported "
                               "with where they are cabled, the panel and version")
    failed_links: list[dict]
    repair_requested: bool
    repair: dict | None = Field(description="the re-patch: pending (panels and versions to apply, moved arcs, "
                                "ready_estimate_s), applied (the restored revision), impossible (why), ...")
    topology: dict | None = None
    schedules: dict | None = Field(default=None, description="per collective: steps, tau, verified, the scheduler "
                                   "served and every candidate, url (the all-to-all: steps, tau, verified, url)")
    compiled: dict[str, dict[str, dict]] | None = Field(default=None, description=(
        "runtime -> collective -> the revision's XML with the runtime's default options (as the plan's `compiled`, "
        "with its size ranges' files); while the revision runs, each file's status so far"))
    compile_failed: list[dict] | None = Field(default=None, description="as the plan's: the files that failed "
                                              "or were refused, with the reason")
    compile_pending: list[str] | None = Field(default=None, description=(
        "while the revision runs: the files (`runtime:collective`, `runtime:collective@i` for size range i) its "
        "worker has still to compile; its verified "
        "schedules (npz, JSON) are served as soon as they are stored, before the XML"))
    predicted_time_us: dict[str, dict[str, float]] | None = Field(default=None, description="as the plan's: the "
                                                                  "dependency-driven time of the schedule served "
                                                                  "at each size")
    barrier_time_us: dict[str, dict[str, float]] | None = Field(default=None, description="as the plan's: the "
                                                                "step-synchronous price of the same schedules")
    workload_time_us: float | None = None
    alltoall: RevisionAllToAllOut | None = Field(default=None, description="when the workload has an all-to-all: "
                                                 "re-planned on the revision's topology")
    restore_gain: dict | None = Field(default=None, description="a restored revision: its times against the "
                                      "failure revision it ends (before: that revision, after: the full topology)")
    failure_cost: dict | None = Field(default=None, description="failure revisions (null for a restored one): "
                                      "before/after per collective and size and for the "
                                      "workload, the naive fallback (a ring over surviving links), the "
                                      "all-to-all's per size (`alltoall`), and for a training plan the iteration "
                                      "on the revision's topology (`training`: iteration_s, iteration_s_before, "
                                      "slowdown, bucket_bytes, allreduce, alltoall, ...)")
    build: dict | None = Field(default=None, description="failure revisions: `schedules_s` building and checking "
                               "the schedules, `compile_s` compiling their XML, `cpu_s` the worker's CPU seconds "
                               "for the whole revision")
    links: dict[str, str]
