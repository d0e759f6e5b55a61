"""Compiling a plan's schedules into the XML runtimes load (DESIGN 4.2 compilation stage, 4.11): the compile
stage of a plan and of a plan revision (the runtimes the plan lists, default the executor, with their default
options), and one file compiled for any other options (`compile_job`, what an on-demand compile job runs:
services.jobs.kinds.compiling). Every outcome is stored as a compile job (services.store.compiles): the file, or the
refusal with the limit it names, so the same request is answered from the store next time.
"""
from __future__ import annotations

import logging
import time

from services.compiler.api import CompileOptions, exact_chunk_bound, format_of
from services.compiler.lowering.grid import chunks_per_shard
from services.synthesis.schedule.ir import ALLGATHER_FAMILY, Collective, Schedule
from services.synthesis.topology.catalog import build

from services.config import get_settings
from services.store import compiles, repo
from services.store.db import session_scope
from services.jobs.requests import workloads
from services.jobs.requests.plan_spec import PlanSpec
from services.jobs.stages.attempts import claim
from services.jobs.stages import early_compile
from services.jobs.stages.compile_pool import run_units
from services.jobs.stages.file_compile import DEFAULT_RUNTIMES, compile_file, unit_deadline
from services.jobs.stages.compile_units import CompileUnit, plan_units
from services.jobs.stages.range_files import substitute

__all__ = ["compile_job", "compile_file", "record_outcome", "stage_compile", "stage_units", "stage_compile_unit",
           "run_unit", "fail_unit", "collect", "unit_deadline", "job_summary", "DEFAULT_RUNTIMES"]

log = logging.getLogger("fabricplan.compiling")


def _url() -> str:
    return get_settings().sqlalchemy_url


def job_summary(job) -> dict:
    """What a plan and the API report about a compile job."""
    out = {"status": job.status, "options": job.options}
    meta = job.meta or {}
    if job.status == "done":
        for k in ("runtime", "steps", "xml_steps", "max_tb_steps", "threadblocks", "nchannels", "chunks", "lowering",
                  "loss", "tau", "options", "predicted_time_us", "schedule_time_us", "predicted_barrier_time_us",
                  "schedule_barrier_time_us", "checked", "simulated",
                  "xml_bytes", "seconds"):
            if k in meta:
                out[k] = meta[k]
    elif job.status == "failed":
        out["reason"] = job.reason
        out["limit"] = meta.get("limit")
    return out


def compile_job(plan_id: str, unit: CompileUnit, *, deadline_s: float | None = None, progress=None, guard=None,
                prefix: str = "") -> dict:
    """Compile one file of a done plan (the typed `unit`: collective, size range, runtime and options), check
    it, store it (or the refusal).
    Returns the job summary. Idempotent: a finished job is returned as it is. `guard(session)` (an outbox
    job's claim) runs before each write and raises when this delivery may no longer write. `prefix` names a
    plan revision's schedules (`rev{n}:`, services.jobs.kinds.revision): its artifacts and its jobs carry it."""
    name, options = unit.name, unit.options
    with session_scope(_url()) as s:
        if guard is not None:
            guard(s)
        job, _ = compiles.request(s, plan_id, name, options, prefix)
        if job.status in ("done", "failed"):
            return job_summary(job)
        compiles.start(s, job)
        plan = repo.get_plan(s, plan_id)
        link = repo.plan_artifact(s, plan_id, f"{prefix}schedule:{name}")
        if plan is None or link is None:
            compiles.fail(s, job, f"plan {plan_id} has no {name} schedule")
            return job_summary(job)
        spec = PlanSpec.load(plan.request)
        data, _ = repo.get_blob(s, link.digest)
        others = _set_schedules(s, plan_id, prefix, unit) if unit.index is not None else {}
    t0 = time.perf_counter()
    sched = Schedule.from_bytes(data)
    topology = build(sched.topology)
    lm = spec.link
    sizes = workloads.alltoall_sizes(spec) if unit.kind is Collective.ALLTOALL else workloads.message_sizes(spec)
    held = None
    if unit.index is not None:              # a size range (compile_units): its ends and the workload sizes in it
        row = link.meta or {}
        sizes = _range_sizes(sizes, row)
        bound = exact_chunk_bound(options, sched.nodes)
        if bound is not None and chunks_per_shard(sched) > bound:
            # finer than a file holds: the fittest schedule over the range that it holds exactly (range_files)
            name, sched, ratio = substitute(sched, topology, others, lm, row.get("min_bytes", 0),
                                            row.get("max_bytes"), bound)
            held = {"scheduler": name, "worst_ratio": ratio, "substitutes": row.get("scheduler")}
    digest, meta, reason = compile_file(plan_id, name, sched, topology, options, lm, sizes,
                                        deadline_s=deadline_s, progress=progress, held=held, t0=t0)
    return record_outcome(plan_id, unit, digest, meta, reason, guard=guard, prefix=prefix)


def record_outcome(plan_id: str, unit: CompileUnit, digest: str | None, meta: dict, reason: str | None, *,
                   guard=None, prefix: str = "") -> dict:
    """The compile job of `unit` (of `prefix` + its name) finished with the file `digest` (or failed with
    `reason`), unless it already finished (compile jobs are written once). Returns the job summary."""
    with session_scope(_url()) as s:
        if guard is not None:
            guard(s)
        job, _ = compiles.request(s, plan_id, unit.name, unit.options, prefix)
        if job.status in ("done", "failed"):
            return job_summary(job)
        if digest is not None:
            compiles.finish(s, job, digest, meta)
        else:
            compiles.fail(s, job, reason, meta)
        return job_summary(job)


def _set_schedules(s, plan_id: str, prefix: str, unit: CompileUnit) -> dict[str, Schedule]:
    """The other ranges' schedules of the set of the range `unit` is, named `<scheduler> (range k)`."""
    c, i = unit.collective, unit.index
    out, k = {}, 0
    while (link := repo.plan_artifact(s, plan_id, f"{prefix}schedule:{c}@{k}")) is not None:
        if k != i:
            named = f"{(link.meta or {}).get('scheduler')} (range {k})"
            out[named] = Schedule.from_bytes(repo.get_blob(s, link.digest)[0])
        k += 1
    return out


def _range_sizes(sizes, row: dict) -> list[float]:
    """The sizes a range's file is priced at: the range's smallest and largest size and the workload's sizes
    in it."""
    lo, hi = row.get("min_bytes", 0), row.get("max_bytes")
    inside = [m for m in sizes if m >= lo and (hi is None or m < hi)]
    return sorted({float(max(lo, 1)), *([float(hi - 1)] if hi is not None else []), *inside})


def stage_units(state: dict, plan_id: str, prefix: str = "") -> tuple[list[CompileUnit], dict[str, str]]:
    """The stage's compile units (services.jobs.stages.compile_units: every collective, the all-to-all too when the
    plan has that schedule, and every size range of the schedule sets) for every runtime the plan lists, and
    the ranges that have no file with the reason."""
    with session_scope(_url()) as s:
        plan = repo.get_plan(s, plan_id)
        runtimes = [r.value for r in PlanSpec.load(plan.request).runtime_list] if plan else list(DEFAULT_RUNTIMES)
        schedules = state.get("schedules") or {}
        collectives = [c.value for c in ALLGATHER_FAMILY]
        if Collective.ALLTOALL.value in schedules:          # the plan built one (plan.alltoall)
            collectives.append(Collective.ALLTOALL.value)
        by_size = {c: (schedules.get(c) or {}).get("by_size") or [] for c in collectives}
        digests, sizes = {}, {}
        for c in collectives:
            for name in [c] + [f"{c}@{i}" for i in range(len(by_size[c]))]:
                link = repo.plan_artifact(s, plan_id, f"{prefix}schedule:{name}")
                if link is not None:
                    digests[name] = link.digest
                    sizes[name] = repo.blob_size(s, link.digest)
    return plan_units(runtimes, collectives, by_size, digests, sizes)


def run_unit(plan_id: str, unit: CompileUnit, deadline_s: float | None, prefix: str = "", progress=None) -> dict:
    """One unit's file compiled and stored (or its refusal); an allreduce whose phase refused on limits that
    only grow is refused without compiling (`_implied_refusal`). An alias unit is the main file: nothing to
    compile."""
    if unit.alias:
        return {}
    implied = (_implied_refusal(plan_id, unit.options.key(), prefix)
               if unit.collective == Collective.ALLREDUCE and unit.index is None else None)
    if implied is not None:             # an allreduce runs both phases' messages on the same budget
        return refuse(plan_id, unit, implied, prefix)
    return compile_job(plan_id, unit, deadline_s=deadline_s, prefix=prefix, progress=progress)


def fail_unit(plan_id: str, unit: CompileUnit, reason: str, prefix: str = "") -> None:
    """Record that `unit`'s compile process died before it recorded an outcome (services.jobs.stages.compile_pool)."""
    with session_scope(_url()) as s:
        job, _ = compiles.request(s, plan_id, unit.name, unit.options, prefix)
        if job.status not in ("done", "failed"):
            compiles.fail(s, job, reason, {"limit": "process"})


def stage_compile(state: dict, plan_id: str, advance, prefix: str = "") -> dict:
    """The plan's compile stage: every unit (`stage_units`) with the runtime's default options (what GET
    .../schedules/{collective}?format=msccl&runtime=R[&range=i] serves), compiled in parallel in forked
    processes within the memory budget (services.jobs.stages.compile_pool). A runtime that cannot take a schedule
    does not fail the plan, nor does a compile process that dies: the file's refusal or failure is reported
    with its reason. The main files an embedded plan compiled while its schedules were checked
    (services.jobs.stages.early_compile) are recorded here, not compiled again. A plan revision's compile stage
    (services.jobs.kinds.revision) is the same with its artifact prefix and `advance` of the revision."""
    early = None if prefix else early_compile.take(plan_id)
    if state.get("stop"):
        if early is not None:
            early.stop()
        return state
    units, skipped = stage_units(state, plan_id, prefix)
    deadline = unit_deadline(len({u.runtime for u in units}))
    st = get_settings()
    files = [u for u in units if not u.alias]          # an alias is a range served by its collective's file
    advance(plan_id, "compile", 0.96, f"compiling {len(files)} XML files")
    done = _record_early(plan_id, early, files, advance) if early is not None else set()
    rest = [u for u in files if u.label not in done]
    run_units(rest, lambda u: run_unit(plan_id, u, deadline, prefix),
              lambda u, why: fail_unit(plan_id, u, why, prefix), processes=st.compile_processes_resolved,
              budget_bytes=st.compile_memory_budget_bytes, time_limit_s=st.compile_unit_time_limit_s,
              on_done=lambda u, finished, total: _files_done(advance, plan_id, u, len(done) + finished, len(files)))
    return collect(state, plan_id, units, skipped, prefix)


def _record_early(plan_id: str, early, files: list[CompileUnit], advance) -> set[str]:
    """Wait for the main files compiled while the schedules were checked (services.jobs.stages.early_compile) and
    record them as the stage's compile jobs, in the stage's order (an allreduce after its phases, so a phase's
    refusal implies the allreduce's as in `run_unit`); returns the labels recorded."""
    compiled = []

    def arrived(u: CompileUnit, outcome) -> None:
        if outcome is not None:                         # a process that died: its file compiles below
            compiled.append(u)
            _files_done(advance, plan_id, u, len(compiled), len(files))

    outcomes = early.outcomes(arrived)
    recorded = set()
    for u in files:
        o = outcomes.get(u.label)
        if o is None or u.index is not None or u.alias:
            continue                                    # compiled here (a process that died: once more)
        implied = (_implied_refusal(plan_id, u.options.key()) if u.collective == Collective.ALLREDUCE else None)
        if implied is not None:
            refuse(plan_id, u, implied)
        else:
            record_outcome(plan_id, u, o.digest, o.meta, o.reason)
        recorded.add(u.label)
    return recorded


def stage_compile_unit(plan_id: str, unit: CompileUnit, total: int, advance) -> dict:
    """One unit of the scaled deployment's compile chord (workers.tasks.compile_unit): compiled in a forked
    process (a killed compile fails only this file), then the plan's progress by the files finished."""
    with session_scope(_url()) as s:
        claim(s, plan_id)
        runtimes = len(PlanSpec.load(repo.get_plan(s, plan_id).request).runtime_list)
    st = get_settings()
    run_units([unit], lambda u: run_unit(plan_id, u, unit_deadline(runtimes)),
              lambda u, why: fail_unit(plan_id, u, why), processes=1, budget_bytes=st.compile_memory_budget_bytes,
              time_limit_s=st.compile_unit_time_limit_s)
    with session_scope(_url()) as s:
        finished = compiles.finished_count(s, plan_id, "")
    _files_done(advance, plan_id, unit, min(finished, total), total)
    return {"unit": unit.label}


def _files_done(advance, plan_id: str, unit: CompileUnit, finished: int, total: int) -> None:
    """The compile stage's progress once `finished` of its `total` files are compiled (the latest: `unit`)."""
    advance(plan_id, "compile", 0.96 + 0.03 * finished / max(1, total),
            f"compiled {finished} of {total} XML files ({unit.label})")


def collect(state: dict, plan_id: str, units: list[CompileUnit], skipped: dict[str, str], prefix: str = "") -> dict:
    """The state with `compiled`: runtime -> collective -> the main file's summary (with `format`) and, for a
    collective with a schedule set, `by_size`: per range its window, the range's scheduler, the file's job
    summary and `xml_schedule`, the schedule the file holds (the range's own, or the substitute of a range
    finer than a file holds: services.jobs.stages.range_files) with its cost. (The files that failed are derived from
    it where they are shown: services.api.plan_access.compile_failed.)"""
    compiled: dict = {}
    with session_scope(_url()) as s:
        for u in units:
            per = compiled.setdefault(u.runtime, {})
            job = compiles.get(s, plan_id, prefix + u.collective, CompileOptions(u.runtime).key()) if u.alias \
                else compiles.get(s, plan_id, prefix + u.name, u.options.key())
            summary = job_summary(job) if job is not None else {"status": "failed",
                                                               "reason": "the compile was not recorded"}
            if u.index is None:
                per[u.collective] = {**summary, "format": format_of(u.runtime)}
                continue
            row = ((state.get("schedules") or {}).get(u.collective) or {}).get("by_size")[u.index]
            entry = {"range": u.index, "min_bytes": u.min_bytes, "max_bytes": u.max_bytes,
                     "window": [u.options.min_bytes, u.options.max_bytes], "scheduler": row["scheduler"],
                     **summary}
            if u.alias:
                entry["same_file_as"] = u.collective
            if summary["status"] == "done":
                entry["xml_schedule"] = _xml_schedule(row, job.meta or {})
            per.setdefault(u.collective, {}).setdefault("by_size", []).append(entry)
    for label, why in skipped.items():
        runtime, name = label.split(":", 1)
        c = name.split("@")[0]
        compiled.setdefault(runtime, {}).setdefault(c, {}).setdefault("by_size_skipped", {})[name] = why
    return {**state, "compiled": compiled}


def _xml_schedule(row: dict, meta: dict) -> dict:
    """Which schedule a range's file holds and its cost (steps, tau; the compiled program's time at the range's
    ends and the workload sizes in it is the job's `predicted_time_us`): the range's own, or the substitute
    `range_files.substitute` chose, or the compiler's chunked re-solve."""
    held = meta.get("held")
    exact = held is None and meta.get("lowering") == "exact"
    name = row["scheduler"] if exact else ((held or {}).get("scheduler")
                                           or f"{meta.get('lowering')}/{meta.get('chunks')}")
    out = {"scheduler": name, "steps": meta.get("steps"), "tau": meta.get("tau"), "exact": exact}
    if not exact:
        out["substitutes"] = {"scheduler": row["scheduler"], "steps": row["steps"], "tau": row["tau"],
                              "reason": "its grid needs more chunks per shard than the file holds (max_chunks, "
                                        "int16 offsets): the file holds the fastest schedule over the range that "
                                        "it holds exactly (services.jobs.stages.range_files)",
                              **({"worst_ratio": held["worst_ratio"]} if held else {})}
    return out


# limits that only grow with the messages of a program: an allreduce carries both of its phases' messages with
# the same peers, so a phase refused on these alone (for every lowering and option tried, on the same chunk
# grid) refuses the allreduce too
_MONOTONE = {"max_parser_nodes", "max_children", "max_offset", "max_steps", "max_tbs", "max_tbs_per_channel",
             "max_channels"}


def _implied_refusal(plan_id: str, options_key: str, prefix: str = "") -> str | None:
    grid = None
    for c in (Collective.ALLGATHER.value, Collective.REDUCESCATTER.value):
        with session_scope(_url()) as s:
            job = compiles.get(s, plan_id, prefix + c, options_key)
            if job is None or job.status != "failed":
                continue
            meta, reason = job.meta or {}, job.reason
            if grid is None:
                link = repo.plan_artifact(s, plan_id, f"{prefix}schedule:allreduce")
                grid = Schedule.from_bytes(repo.get_blob(s, link.digest)[0]).grid if link else None
        if meta.get("limits") and set(meta["limits"]) <= _MONOTONE and meta.get("grid") == grid:
            return (f"the {c} phase alone fits no program ({', '.join(meta['limits'])}), and an allreduce carries "
                    f"its messages too: {reason}")
    return None


def refuse(plan_id: str, unit: CompileUnit, reason: str, prefix: str = "") -> dict:
    """Record a refusal of `unit` known without compiling."""
    limit = next((x for x in sorted(_MONOTONE) if x in reason), "fit")
    with session_scope(_url()) as s:
        job, _ = compiles.request(s, plan_id, unit.name, unit.options, prefix)
        if job.status in ("queued", "running"):
            compiles.fail(s, job, reason, {"limit": limit, "implied": True})
        return job_summary(job)
