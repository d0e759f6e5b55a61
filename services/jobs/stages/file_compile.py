"""One XML file compiled, checked and stored (DESIGN 4.11), apart from recording it: what a plan's compile job
(services.jobs.stages.compile_stage) and a plan's early compile (services.jobs.stages.early_compile) both run in a
compile process, and the fit search budget of one file of the compile stage.
"""
from __future__ import annotations

import logging
import time

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.exc import DBAPIError

from services.compiler.api import CompileOptions, check_xml, compile_schedule
from services.compiler.errors import CompileError
from services.compiler.check.msccl_simulate import simulable
from services.compiler.check.tokenizer import lexical_findings
from services.compiler.runtimes.names import DEFAULT_RUNTIME, Format
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.ir import Schedule

from services.config import get_settings
from services.store import repo
from services.store.db import session_scope

__all__ = ["DEFAULT_RUNTIMES", "ONECCL_SIMULATE_MAX", "compile_file", "unit_deadline"]

log = logging.getLogger("fabricplan.compiling")
DEFAULT_RUNTIMES = (DEFAULT_RUNTIME.value,)
ONECCL_SIMULATE_MAX = 400_000          # instructions: simulate oneCCL files up to this size


def _url() -> str:
    return get_settings().sqlalchemy_url


def compile_file(plan_id: str, collective: str, sched: Schedule, topology, options: CompileOptions, lm: LinkModel,
                 sizes, *, deadline_s: float | None = None, progress=None, held: dict | None = None,
                 t0: float | None = None) -> tuple[str | None, dict, str | None]:
    """Compile `sched` for `options`, check the file and store its bytes (a content-addressed blob, served only
    once a compile job names it): (digest, meta, None), or (None, meta, reason) for a refusal or a failure.
    `compile_job` records the outcome; a plan's early compile (services.jobs.stages.early_compile) records it once the
    schedule is verified."""
    t0 = time.perf_counter() if t0 is None else t0
    meta: dict | None = None
    reason: str | None = None
    digest = None
    try:
        simulate_max = get_settings().compile_simulate_max_steps
        art = compile_schedule(sched, topology, options=options, link=lm, sizes=sizes,
                               deadline_s=deadline_s, progress=progress, simulate_max_steps=simulate_max)
        if art.fmt == "msccl" and art.check_report is None and not simulable(
                art.xml_steps or 0, art.xml_threadblocks or 0, art.xml_dependent_steps or 0, simulate_max):
            # too large to re-parse and simulate here (steps or the simulator's memory, check.msccl_simulate.simulable):
            # the fit search enforced the profile's limits on the program it printed and proved it deadlock-free
            # (services.compiler.check.deadlock); the text still goes through the runtimes' tokenizer
            problems = lexical_findings(art.xml_data)
            if problems:
                raise RuntimeError(f"the compiled file fails the runtimes' tokenizer: {problems[0]}")
            checked = {"checked": "limits, tokenizer and deadlock proof (too large to simulate)", "simulated": []}
        elif art.fmt == Format.ONECCL and art.max_tb_steps * art.nodes > ONECCL_SIMULATE_MAX:
            checked = {"checked": "compiler only (too large to check here)", "simulated": []}
        else:
            if art.check_report is not None:     # the fit search checked and simulated exactly this file
                rep = art.check_report
            elif art.fmt == "msccl":
                rep = check_xml(art.xml, "msccl", runtime=art.runtime, max_steps=options.max_steps)
            else:
                rep = check_xml(art.xml, Format.ONECCL.value)
            if not rep.ok:                          # never store a file that fails the checker
                raise RuntimeError(f"the compiled {art.fmt} file fails its check: {rep.error}")
            checked = {"checked": "checker" + (" and simulator" if rep.simulated else ""),
                       "simulated": rep.simulated, "comm_steps": rep.comm_steps}
        meta = {**art.as_dict(), **checked, **({"held": held} if held else {})}
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
    return digest, meta, reason


def unit_deadline(runtimes: int) -> float:
    """The fit search budget of one unit (services.compiler: the search stops there and reports the best)."""
    st = get_settings()
    return max(10.0, min(float(st.compile_time_limit_s), st.task_time_limit_s / (4 * max(1, runtimes))))


def _plain(x):
    return x if x is None or isinstance(x, (int, float, str, bool)) else str(x)
