"""Compiling a plan's schedules into the XML runtimes load (DESIGN 4.2 compilation stage, 4.11): at plan time
for the runtimes the plan lists (default: the executor, with its default options), on demand in a worker for
any other options. Every outcome is stored as a compile job (services.store.compiles): the file, or the
refusal with the limit it names, so the same request is answered from the store next time.
"""
from __future__ import annotations

import logging
import time

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.exc import DBAPIError

from services.compiler.api import CompileOptions, check_xml, compile_schedule, format_of
from services.compiler.errors import CompileError
from services.compiler.msccl_check import simulable
from services.compiler.nccl_xml import lexical_findings
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Collective, Schedule
from services.synthesis.topology.catalog import build

from ..config import get_settings
from ..store import compiles, repo
from ..store.db import session_scope
from ..store.models import CompileJob
from . import workloads
from .attempts import claim

__all__ = ["compile_job", "run", "stage_compile", "job_summary", "DEFAULT_RUNTIMES"]

log = logging.getLogger("fabricplan.compiling")
DEFAULT_RUNTIMES = ("executor",)
ONECCL_SIMULATE_MAX = 400_000          # instructions: simulate oneCCL files up to this size


def _url() -> str:
    return get_settings().sqlalchemy_url


def job_summary(job) -> dict:
    """What a plan and the API report about a compile job."""
    out = {"status": job.status, "options": job.options}
    meta = job.meta or {}
    if job.status == "done":
        for k in ("runtime", "steps", "xml_steps", "max_tb_steps", "threadblocks", "nchannels", "chunks", "lowering",
                  "loss", "options", "predicted_time_us", "schedule_time_us", "checked", "simulated", "xml_bytes",
                  "seconds"):
            if k in meta:
                out[k] = meta[k]
    elif job.status == "failed":
        out["reason"] = job.reason
        out["limit"] = meta.get("limit")
    return out


def compile_job(plan_id: str, collective: str, options: CompileOptions, *, deadline_s: float | None = None,
                progress=None, guard=None, prefix: str = "") -> dict:
    """Compile one schedule of a done plan for `options`, check the file, store it (or the refusal).
    Returns the job summary. Idempotent: a finished job is returned as it is. `guard(session)` (an outbox
    job's claim) runs before each write and raises when this delivery may no longer write. `prefix` names a
    plan revision's schedules (`rev{n}:`, services.jobs.revision): its artifacts and its jobs carry it."""
    key = prefix + collective
    with session_scope(_url()) as s:
        if guard is not None:
            guard(s)
        job, _ = compiles.request(s, plan_id, collective, options, prefix)
        if job.status in ("done", "failed"):
            return job_summary(job)
        compiles.start(s, job)
        plan = repo.get_plan(s, plan_id)
        link = repo.plan_artifact(s, plan_id, f"{prefix}schedule:{collective}")
        if plan is None or link is None:
            compiles.fail(s, job, f"plan {plan_id} has no {collective} schedule")
            return job_summary(job)
        req = dict(plan.request)
        data, _ = repo.get_blob(s, link.digest)
    t0 = time.perf_counter()
    sched = Schedule.from_bytes(data)
    lm = LinkModel.from_units(req["alpha_us"], req["bandwidth_gbps"])
    sizes = workloads.alltoall_sizes(req) if collective == "alltoall" else workloads.message_sizes(req)
    meta: dict | None = None
    reason: str | None = None
    digest = None
    try:
        simulate_max = get_settings().compile_simulate_max_steps
        art = compile_schedule(sched, build(sched.topology), options=options, link=lm, sizes=sizes,
                               deadline_s=deadline_s, progress=progress, simulate_max_steps=simulate_max)
        if art.fmt == "msccl" and art.check_report is None and not simulable(
                art.xml_steps or 0, art.xml_data.count(b"<tb "), art.xml_data.count(b'hasdep="1"'), simulate_max):
            # too large to re-parse and simulate here (steps or the simulator's memory, msccl_check.simulable):
            # the fit search enforced the profile's limits on the program it printed and proved it deadlock-free
            # (services.compiler.deadlock); the text still goes through the runtimes' tokenizer
            problems = lexical_findings(art.xml_data)
            if problems:
                raise RuntimeError(f"the compiled file fails the runtimes' tokenizer: {problems[0]}")
            checked = {"checked": "limits, tokenizer and deadlock proof (too large to simulate)", "simulated": []}
        elif art.fmt == "oneccl" and art.max_tb_steps * art.nodes > ONECCL_SIMULATE_MAX:
            checked = {"checked": "compiler only (too large to check here)", "simulated": []}
        else:
            if art.check_report is not None:     # the fit search checked and simulated exactly this file
                rep = art.check_report
            elif art.fmt == "msccl":
                rep = check_xml(art.xml, "msccl", runtime=art.runtime, max_steps=options.max_steps)
            else:
                rep = check_xml(art.xml, "oneccl")
            if not rep.ok:                          # never store a file that fails the checker
                raise RuntimeError(f"the compiled {art.fmt} file fails its check: {rep.error}")
            checked = {"checked": "checker" + (" and simulator" if rep.simulated else ""),
                       "simulated": rep.simulated, "comm_steps": rep.comm_steps}
        meta = {**art.as_dict(), **checked}
        meta["attempts"] = art.attempts[-8:]
        with session_scope(_url()) as s:
            digest = repo.put_blob(s, art.xml_data, "xml", "application/xml")
    except CompileError as exc:
        reason = str(exc)
        attempts = getattr(exc, "attempts", [])
        meta = {"limit": exc.limit, "value": _plain(exc.value), "maximum": _plain(exc.maximum),
                "limits": sorted({a["limit"] for a in attempts if a.get("limit")} | {exc.limit or "fit"}
                                 | ({"deadline"} if getattr(exc, "timed_out", False) else set())),
                "grid": sched.grid, "attempts": attempts[-8:], "seconds": time.perf_counter() - t0}
    except (SoftTimeLimitExceeded, DBAPIError):     # the time limit fails the job with that reason; a database
        raise                                       # error is retried by the task, never the job's reason
    except MemoryError:                             # the frames holding the program are gone once we leave here
        reason = (f"compiling the {collective} schedule for {options.runtime} ran out of memory (the worker's "
                  "limit, FABRICPLAN_TASK_MEMORY_LIMIT_MB): ask for fewer channels or chunks, or raise the limit")
        meta = {"limit": "memory", "seconds": time.perf_counter() - t0}
    except Exception as exc:                        # recorded, so the plan and later requests see the reason
        log.exception("compile of plan %s %s %s failed", plan_id, collective, options.key())
        reason = f"internal error while compiling: {type(exc).__name__}: {exc}"
        meta = {"limit": "internal", "seconds": time.perf_counter() - t0}
    with session_scope(_url()) as s:
        if guard is not None:
            guard(s)
        job = compiles.get(s, plan_id, key, options.key())
        if digest is not None:
            compiles.finish(s, job, digest, meta)
        else:
            compiles.fail(s, job, reason, meta)
        return job_summary(job)


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
    return compile_job(plan_id, collective, CompileOptions(**spec), deadline_s=get_settings().compile_time_limit_s,
                       guard=guard, prefix=prefix)


def _plain(x):
    return x if x is None or isinstance(x, (int, float, str, bool)) else str(x)


def stage_compile(state: dict, plan_id: str, advance, prefix: str = "") -> dict:
    """The plan's compile stage: every collective (the all-to-all too when the plan has that schedule) for every
    runtime the plan lists, with the runtime's default options (what GET .../schedules/{collective}?format=msccl&
    runtime=R serves). A runtime that cannot take a schedule does not fail the plan: its refusal is reported with
    the limit. A plan revision's compile stage (services.jobs.revision) is the same with its artifact prefix and
    `advance` of the revision."""
    if state.get("stop"):
        return state
    with session_scope(_url()) as s:
        plan = repo.get_plan(s, plan_id)
        runtimes = list((plan.request if plan else {}).get("runtimes") or DEFAULT_RUNTIMES)
    st = get_settings()
    deadline = max(10.0, min(float(st.compile_time_limit_s), st.task_time_limit_s / (4 * max(1, len(runtimes)))))
    collectives = [Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE]
    if "alltoall" in (state.get("schedules") or {}):        # the plan built one (plan.alltoall)
        collectives.append(Collective.ALLTOALL)
    compiled: dict = {}
    for i, runtime in enumerate(runtimes):
        done: dict = {}
        for j, c in enumerate(collectives):
            frac = 0.96 + 0.03 * (i + j / len(collectives)) / len(runtimes)
            advance(plan_id, "compile", frac, f"compiling the {c.value} XML for {runtime}")
            options = CompileOptions(runtime)
            implied = _implied_refusal(plan_id, done, prefix) if c is Collective.ALLREDUCE else None
            if implied is not None:             # an allreduce runs both phases' messages on the same budget
                summary = refuse(plan_id, c.value, options, implied, prefix)
            else:
                summary = compile_job(plan_id, c.value, options, deadline_s=deadline, prefix=prefix,
                                      progress=lambda msg, f=frac: advance(plan_id, "compile", f, msg))
            summary["format"] = format_of(runtime)
            done[c.value] = summary
        compiled[runtime] = done
    return {**state, "compiled": compiled}


# limits that only grow with the messages of a program: an allreduce carries both of its phases' messages with
# the same peers, so a phase refused on these alone (for every lowering and option tried, on the same chunk
# grid) refuses the allreduce too
_MONOTONE = {"max_parser_nodes", "max_children", "max_offset", "max_steps", "max_tbs", "max_tbs_per_channel",
             "max_channels"}


def _implied_refusal(plan_id: str, done: dict, prefix: str = "") -> str | None:
    grid = None
    for c in ("allgather", "reducescatter"):
        summary = done.get(c) or {}
        if summary.get("status") != "failed":
            continue
        with session_scope(_url()) as s:
            meta = (compiles.get(s, plan_id, prefix + c, summary["options"]).meta or {})
            if grid is None:
                link = repo.plan_artifact(s, plan_id, f"{prefix}schedule:allreduce")
                grid = Schedule.from_bytes(repo.get_blob(s, link.digest)[0]).grid if link else None
        if meta.get("limits") and set(meta["limits"]) <= _MONOTONE and meta.get("grid") == grid:
            return (f"the {c} phase alone fits no program ({', '.join(meta['limits'])}), and an allreduce carries "
                    f"its messages too: {summary.get('reason')}")
    return None


def refuse(plan_id: str, collective: str, options: CompileOptions, reason: str, prefix: str = "") -> dict:
    """Record a refusal known without compiling."""
    limit = next((x for x in sorted(_MONOTONE) if x in reason), "fit")
    with session_scope(_url()) as s:
        job, _ = compiles.request(s, plan_id, collective, options, prefix)
        if job.status in ("queued", "running"):
            compiles.fail(s, job, reason, {"limit": limit, "implied": True})
        return job_summary(job)
