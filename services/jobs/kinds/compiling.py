"""The on-demand compile job (GET .../schedules/{collective}?format=msccl with options no plan compiled; DESIGN
4.11): one schedule of a done plan or revision compiled for the job's options, checked and stored, or refused
with the limit it names (services.jobs.stages.compile_stage.compile_job). A plan's and a revision's compile stage
is services.jobs.stages.compile_stage's.
"""
from __future__ import annotations

from services.compiler.api import CompileOptions
from services.config import get_settings
from services.store.db import session_scope
from services.store.models import CompileJob
from services.jobs.stages.attempts import claim
from services.jobs.stages.compile_stage import compile_job
from services.jobs.stages.compile_units import CompileUnit

__all__ = ["run"]


def _url() -> str:
    return get_settings().sqlalchemy_url


def run(job_id: str) -> dict:
    """The worker's part of an on-demand compile job (services.store.jobs delivers it with an attempt)."""
    def guard(s) -> None:
        claim(s, job_id, "compile")

    with session_scope(_url()) as s:
        guard(s)
        job = s.get(CompileJob, job_id)
        plan_id, spec = job.plan_id, dict(job.spec)
        prefix = spec.pop("prefix", "")
        collective = job.collective.removeprefix(prefix)
    unit = CompileUnit.of_job(collective, CompileOptions(**spec))
    return compile_job(plan_id, unit, deadline_s=get_settings().compile_time_limit_s, guard=guard, prefix=prefix)
