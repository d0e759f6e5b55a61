"""The stage durations the store recorded for finished plans, as the corrections that weigh a running plan's
stages (services.jobs.stages.stage_weights: `plan_kind`, `corrections`).

A plan's corrections are read once, when the worker first records its progress, from the stage events
(services.store.stage_events: each closed stage's `duration_s`) of the most recent finished plans of its kind, and
kept for the plan (one query for the plans, one for their events, whatever the plan's number of updates); a
plan's bands therefore do not move while it runs.
"""
from __future__ import annotations

from collections import OrderedDict
from threading import Lock

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.requests.workloads import has_alltoall
from services.jobs.stages.stage_weights import corrections, plan_kind
from services.store.models import Plan, PlanEvent

__all__ = ["SCANNED", "SAMPLES", "recorded_corrections", "plan_correction"]

SCANNED = 200
"""The most recent finished plans looked at for plans of the running plan's kind."""

SAMPLES = 20
"""At most this many finished plans of the kind inform the corrections (their median)."""

_KEPT = 512
_cache: OrderedDict[str, dict[str, float] | None] = OrderedDict()
_lock = Lock()
_alltoall: dict[str, bool] = {}


def _finished_of_kind(s: Session, kind: str) -> list[tuple[str, PlanSpec, bool]]:
    rows = s.execute(select(Plan.id, Plan.request).where(Plan.status == "done")
                     .order_by(Plan.updated_at.desc(), Plan.id.desc()).limit(SCANNED)).all()
    out = []
    for pid, request in rows:
        try:
            spec = PlanSpec.load(request)
            alltoall = _alltoall.get(pid)
            if alltoall is None:           # a request never changes: read once per process
                alltoall = _alltoall[pid] = has_alltoall(spec)
                if len(_alltoall) > 4 * SCANNED:
                    _alltoall.pop(next(iter(_alltoall)))
        except (ValidationError, ValueError):
            continue                       # a request from an older schema: not a sample
        if plan_kind(spec, alltoall) == kind:
            out.append((pid, spec, alltoall))
            if len(out) == SAMPLES:
                break
    return out


def recorded_corrections(s: Session, spec: PlanSpec, alltoall: bool) -> dict[str, float] | None:
    """The corrections (stage_weights.corrections) the recent finished plans of the kind of `spec` recorded;
    None when none has finished (the kind's defaults apply)."""
    finished = _finished_of_kind(s, plan_kind(spec, alltoall))
    if not finished:
        return None
    durations: dict[str, dict[str, float]] = {pid: {} for pid, _, _ in finished}
    for pid, stage, seconds in s.execute(
            select(PlanEvent.plan_id, PlanEvent.stage, PlanEvent.duration_s)
            .where(PlanEvent.plan_id.in_(list(durations)), PlanEvent.duration_s.is_not(None))
            .order_by(PlanEvent.id)):
        if ":" not in stage:                # a revision's stages (rev{n}:stage) are not the plan's
            durations[pid][stage] = float(seconds)     # a stage run again (a redelivery): its latest run
    return corrections((spec_, alltoall_, durations[pid]) for pid, spec_, alltoall_ in finished)


def plan_correction(s: Session, plan: Plan) -> dict[str, float] | None:
    """The corrections that weigh `plan`'s stages: read once for the plan (`recorded_corrections`) and kept."""
    with _lock:
        if plan.id in _cache:
            _cache.move_to_end(plan.id)
            return _cache[plan.id]
    spec = PlanSpec.load(plan.request)
    found = recorded_corrections(s, spec, has_alltoall(spec))
    with _lock:
        _cache[plan.id] = found
        while len(_cache) > _KEPT:
            _cache.popitem(last=False)
    return found
