"""What every job kind shares (DESIGN 4.2; the outbox and its attempts: services.store.jobs): the delivery
attempt a task runs, claiming the job's row for it, progress (the plan's stage, fraction and message) and
failing a job with a reason. It imports no stage: the job kinds (services.jobs.kinds.plan, evaluation, compiling,
revision) import it.

A task runs for one delivery attempt of its job (`attempt_of`); every write first claims the job's row for
that attempt (services.store.jobs.claim), so a task whose job finished, failed or was delivered again stops
(`Superseded`) instead of writing.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from sqlalchemy.orm import object_session

from services.config import get_settings
from services.store import compiles, fabrics, job_metrics, jobs, notify, repo, stage_events
from services.store.db import session_scope
from services.store.models import CompileJob, Evaluation, Plan, PlanEvent, PlanRevision, utcnow
from services.jobs.stages.stage_history import plan_correction
from services.jobs.stages.stage_weights import plan_progress
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.requests.workloads import has_alltoall

__all__ = ["PlanInputError", "Superseded", "attempt_of", "current_attempt", "claim", "plan_spec", "advance",
           "weighted", "fail", "fail_plan"]


class PlanInputError(ValueError):
    """The request cannot be planned (the reason is shown to the user)."""


class Superseded(Exception):
    """The job finished, failed or was delivered again: this task must not write to it."""


_ATTEMPT: ContextVar[int | None] = ContextVar("fabricplan_attempt", default=None)


@contextmanager
def attempt_of(attempt: int | None):
    """Run the enclosed stage as delivery `attempt` of its job (None: unguarded, a direct call)."""
    token = _ATTEMPT.set(attempt)
    try:
        yield
    finally:
        _ATTEMPT.reset(token)


def current_attempt() -> int | None:
    return _ATTEMPT.get()


def claim(s, job_id: str, kind: str = "plan") -> None:
    """Hold the job's row for this attempt in the transaction of `s`, or raise Superseded."""
    if not jobs.claim(s, kind, job_id, _ATTEMPT.get()):
        raise Superseded(f"{kind} {job_id} is finished or another delivery runs it")


def _url() -> str:
    return get_settings().sqlalchemy_url


def plan_spec(plan_id: str) -> PlanSpec:
    """The plan's request, typed: loaded once by the stage that asks (PlanInputError when the plan does not
    exist)."""
    with session_scope(_url()) as s:
        plan = repo.get_plan(s, plan_id)
        if plan is None:
            raise PlanInputError(f"plan {plan_id} does not exist")
        return PlanSpec.load(plan.request)


def weighted(plan: Plan | None, stage: str, progress: float) -> float:
    """The plan's progress at the point `progress` of its stage's band (services.jobs.stages.stage_weights),
    its stages weighed by the durations recorded for finished plans of its kind (stage_history)."""
    if plan is None:
        return progress
    spec = PlanSpec.load(plan.request)
    correction = plan_correction(object_session(plan), plan)
    return plan_progress(spec, has_alltoall(spec), stage, progress, correction)


def advance(plan_id: str, stage: str, progress: float, message: str | None = None) -> None:
    """The plan's stage, progress and message (its heartbeat too), for this attempt; Superseded otherwise.
    `progress` is a point of the stage's band (stage_weights.LEGACY_BANDS); the plan records it weighted by the
    stages' measured costs, never below what it recorded before (a bar that only moves forward)."""
    with session_scope(_url()) as s:
        plan = repo.get_plan(s, plan_id)
        progress = weighted(plan, stage, progress)
        if plan is not None and plan.status == "running":
            progress = max(progress, plan.progress)
        if not repo.advance(s, plan_id, stage=stage, progress=progress, message=message, attempt=_ATTEMPT.get()):
            raise Superseded(f"plan {plan_id} is finished or another delivery runs it")


def fail(kind: str, job_id: str, reason: str, attempt: int | None = None, url: str | None = None) -> bool:
    """Fail a plan, an evaluation, a plan revision or a compile job with the reason, only while it runs
    `attempt` (by default this task's). True when this call failed it."""
    attempt = _ATTEMPT.get() if attempt is None else attempt
    if kind == "plan":
        return fail_plan(job_id, reason, attempt, url)
    with session_scope(url or _url()) as s:
        if not jobs.claim(s, kind, job_id, attempt):
            return False
        _RECORD_FAILURE[kind](s, s.get(jobs.KINDS[kind], job_id), reason)
        return True


def fail_plan(plan_id: str, reason: str, attempt: int | None = None, url: str | None = None) -> bool:
    """Fail the plan with the reason (only while it runs `attempt`, by default this task's) and release
    whatever it reserved on a fabric."""
    with session_scope(url or _url()) as s:
        failed = repo.fail(s, plan_id, reason, attempt=_ATTEMPT.get() if attempt is None else attempt)
        if failed:
            fabrics.release_plan(s, plan_id)
        return failed


def _compile_failed(s, job: CompileJob, reason: str) -> None:
    """An on-demand compile job failed (its worker hit a limit or died)."""
    compiles.fail(s, job, reason, {**(job.meta or {}), "limit": (job.meta or {}).get("limit") or "worker"})


def _evaluation_failed(s, ev: Evaluation, reason: str) -> None:
    ev.status, ev.reason, ev.updated_at = "failed", reason, utcnow()
    job_metrics.job_ended(s, "evaluation", "failed", ev.created_at, ev.updated_at)
    notify.changed(s, "evaluation", ev.id)


def _revision_failed(s, rev: PlanRevision, reason: str) -> None:
    rev.status, rev.reason, rev.updated_at = "failed", reason, utcnow()
    job_metrics.job_ended(s, "revision", "failed", rev.created_at, rev.updated_at)
    plan = s.get(Plan, rev.plan_id)
    stage_events.close_stage(s, plan.id, f"rev{rev.number}:{rev.stage}", status=plan.status, progress=plan.progress,
                             message=f"revision {rev.number}: {rev.stage} failed")
    s.add(PlanEvent(plan_id=plan.id, status=plan.status, stage="revision", progress=plan.progress,
                    message=f"revision {rev.number} failed: {reason}"))
    notify.changed(s, "plan", plan.id)


_RECORD_FAILURE = {"compile": _compile_failed, "evaluation": _evaluation_failed, "revision": _revision_failed}
