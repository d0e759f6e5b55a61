"""Plan pipeline tasks: thin wrappers over services.planner. A chain per plan:

    frontier -> select -> fabric (hosts, ports, panel configs) -> schedules
             (-> chord(group(bfb_block...), merge) for large BFB solves) -> compile (XML per runtime) -> finish

plus compile_xml: one schedule compiled for other options on demand (GET .../schedules/{c}?format=msccl&...).

Input errors fail the plan with the reason; transient errors retry (bounded); anything else fails the plan
with the stage and the error once the retries are used up.
"""
from __future__ import annotations

import functools

from celery import chain, chord, group
from sqlalchemy.exc import OperationalError

from services import compiling, planner
from services.compiler.api import CompileOptions
from services.synthesis.bfb.lp import ScheduleTooLarge

from .app import celery_app

TRANSIENT = (OperationalError, ConnectionError, TimeoutError)


class PlanTask(celery_app.Task):
    autoretry_for = TRANSIENT
    retry_backoff = 2
    retry_backoff_max = 60
    max_retries = 3

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        plan_id = kwargs.get("plan_id")                # every task takes plan_id by keyword
        if isinstance(plan_id, str):
            planner.fail_plan(plan_id, _reason(self.name, exc))


def _reason(task: str, exc: BaseException) -> str:
    stage = task.rsplit(".", 1)[-1].removeprefix("plan_")
    if isinstance(exc, (planner.PlanInputError, ScheduleTooLarge, ValueError)):
        return f"{stage}: {exc}"
    return f"internal error in stage '{stage}': {type(exc).__name__}: {exc}"


def stage(fn):
    """Input problems (bad parameters, a schedule too large) fail the plan with the stage's reason and stop
    the chain, in the broker and in the embedded worker alike; other errors propagate to retry/on_failure."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (planner.PlanInputError, ScheduleTooLarge, ValueError) as exc:
            planner.fail_plan(kwargs["plan_id"], _reason(fn.__name__, exc))
            return {"stop": True}
    return run


@celery_app.task(base=PlanTask, name="fabricplan.frontier")
@stage
def plan_frontier(*, plan_id: str) -> dict:
    return planner.stage_frontier(plan_id)


@celery_app.task(base=PlanTask, name="fabricplan.select")
@stage
def plan_select(state: dict, *, plan_id: str) -> dict:
    return planner.stage_select(state, plan_id)


@celery_app.task(base=PlanTask, name="fabricplan.fabric")
@stage
def plan_fabric(state: dict, *, plan_id: str) -> dict:
    return planner.stage_fabric(state, plan_id)


@celery_app.task(base=PlanTask, bind=True, name="fabricplan.schedules")
@stage
def plan_schedules(self, state: dict, *, plan_id: str) -> dict:
    blocks = planner.fanout_plan(state, plan_id)
    if blocks:     # one large BFB solve: fan out receiver blocks over the workers, merge in a chord
        expr = state["selected"]["expr"]
        return self.replace(chord(group(bfb_block.s(plan_id=plan_id, expr=expr, transposed=o, receivers=r)
                                        for o, r in blocks),
                                  merge_blocks.s(state=state, plan_id=plan_id)))
    return planner.stage_schedules(state, plan_id)


@celery_app.task(base=PlanTask, name="fabricplan.bfb_block")
@stage
def bfb_block(*, plan_id: str, expr: str, transposed: bool, receivers: list[int]) -> str:
    return planner.stage_bfb_block(plan_id, expr, transposed, receivers)


@celery_app.task(base=PlanTask, name="fabricplan.merge_blocks")
@stage
def merge_blocks(digests: list[str], *, state: dict, plan_id: str) -> dict:
    return planner.stage_schedules(state, plan_id, digests)


@celery_app.task(base=PlanTask, name="fabricplan.compile")
@stage
def plan_compile(state: dict, *, plan_id: str) -> dict:
    return compiling.stage_compile(state, plan_id, planner._advance)


@celery_app.task(name="fabricplan.compile_xml", autoretry_for=TRANSIENT, retry_backoff=2, max_retries=3)
def compile_xml(*, plan_id: str, collective: str, options: dict) -> dict:
    """One schedule compiled for one set of options (the API answered 202 and polls the compile job)."""
    from services.config import get_settings

    return compiling.compile_job(plan_id, collective, CompileOptions(**options),
                                 deadline_s=get_settings().compile_time_limit_s)


@celery_app.task(base=PlanTask, name="fabricplan.finish")
@stage
def plan_finish(state: dict, *, plan_id: str) -> dict:
    return planner.stage_finish(state, plan_id)


def plan_workflow(plan_id: str):
    """The whole plan as one Celery canvas."""
    return chain(plan_frontier.si(plan_id=plan_id), plan_select.s(plan_id=plan_id), plan_fabric.s(plan_id=plan_id),
                 plan_schedules.s(plan_id=plan_id), plan_compile.s(plan_id=plan_id), plan_finish.s(plan_id=plan_id))
