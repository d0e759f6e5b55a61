"""An all-to-all schedule for a job stage (DESIGN 4.2 schedules): the plan's
all-to-all stage (services.jobs.kinds.plan.alltoall, on the chosen topology) and a failure revision's schedules stage
(services.jobs.kinds.revision, on the degraded topology) build it the same way here.

`build_checked` builds the time-stepped LP schedule (services.synthesis.evaluate.alltoall_schedule) and
model-checks it again (every node ends with its block of every other node's buffer); a topology beyond the
library's limits (nodes, LP variables, transfers), the task's time limit or its memory limit raises
`AllToAllRefused` with the reason and which limit it was. `built_result` is what a job reports of a verified
schedule: its measured time T = steps * alpha + tau * D/B against the MCF bound (D/N) / (f B/d) for each of
the workload's all-to-all sizes D, and the summary stored with the `schedule:alltoall` artifact.

`bracket_result` is the fallback when the schedule is too large by both routes: the time-stepped LP (a
degraded topology has no free automorphism group, so one source orbit per node: `remove(torus(16, 16), 0>1)`
would take 2.6 M variables against MAX_LP_VARIABLES = 400 k) and, past it, the pipelined tree routing of LP (3)
by column generation (beyond its transfer budget, roughly N > 400): the throughput f of LP (3) that plan
selection prices an all-to-all with (services.synthesis.evaluate.alltoall.alltoall_throughput, auto method:
exact LP up to 256 nodes without symmetry, column generation above), as its certified bracket [lower, upper], and
the time at the bracket's lower end f = lower, the upper end of the time (no schedule can be faster than the MCF
bound at the optimum, and a routing with throughput `lower` exists), so an all-to-all is never charged too little.
"""
from __future__ import annotations

from celery.exceptions import SoftTimeLimitExceeded

from services.synthesis.evaluate.alltoall import AllToAllResult, alltoall_throughput, alltoall_time_s
from services.synthesis.schedule.cost import LinkModel
from services.synthesis.schedule.verify import ScheduleInvalid, verify
from services.synthesis.topology.graph import Topology

from services.config import get_settings

__all__ = ["REPORTED", "AllToAllRefused", "bracket_result", "build_checked", "built_result"]

# what a plan or revision reports of AllToAllSchedule.to_dict() (schemas.AllToAllOut)
REPORTED = ("expr", "steps", "tau", "tau_exact", "mcf_throughput", "mcf_tau", "bandwidth_over_mcf", "lp_steps",
            "lp_tau", "chunks_per_block", "transfers", "verified", "seconds")


class AllToAllRefused(Exception):
    """No all-to-all schedule for this topology here: `limit` is "size" (the library's nodes, LP variables or
    transfers), "time" (the task's time limit) or "memory" (its memory limit)."""

    def __init__(self, reason: str, limit: str):
        self.reason, self.limit = reason, limit
        super().__init__(reason)


def build_checked(topo: Topology, builder):
    """(schedule, verification report) of `builder(topo)` (alltoall_schedule), checked by the model checker.
    Raises AllToAllRefused for a refusal, RuntimeError for a schedule that fails model checking (a bug)."""
    expr = topo.expr
    try:
        built = builder(topo)
        report = verify(built.schedule, topo)
    except ScheduleInvalid as exc:                      # a bug, not the input's size: fail the job
        raise RuntimeError(f"the all-to-all schedule of {expr} failed model checking: {exc}") from None
    except ValueError as exc:                           # beyond the library's limits for this topology
        raise AllToAllRefused(str(exc), "size") from None
    except SoftTimeLimitExceeded:                       # the job keeps what it has (the task ends in time)
        raise AllToAllRefused(f"building it exceeded the worker's time limit of {get_settings().task_time_limit_s}"
                              " s (FABRICPLAN_TASK_TIME_LIMIT_S)", "time") from None
    except MemoryError:                                 # its frames are freed once we leave the handler
        raise AllToAllRefused(f"building it exceeded the worker's memory limit of "
                              f"{get_settings().task_memory_limit_mb} MiB (FABRICPLAN_TASK_MEMORY_LIMIT_MB)",
                              "memory") from None
    if not report.ok:
        raise RuntimeError(f"the all-to-all schedule of {expr} failed model checking: {report.violation.message}")
    return built, report


def built_result(built, report, link: LinkModel, sizes: list[int]) -> tuple[dict, dict]:
    """(the reported result, the artifact's summary) of a verified schedule: per size D its time
    steps * alpha + tau * D/B and the MCF bound (D/N) / (f B/d)."""
    facts = built.to_dict()
    result = {"status": "built", "reason": None, **{k: facts[k] for k in REPORTED},
              "times_us": {str(d): {"schedule_us": built.time_s(link, d) * 1e6,
                                    "mcf_bound_us": built.mcf_time_s(link, d) * 1e6} for d in sizes}}
    summary = {"steps": report.steps, "tau": float(report.tau), "tau_exact": str(report.tau), "verified": True,
               "transfers": report.transfers}
    return result, summary


def bracket_result(topo: Topology, link: LinkModel, sizes: list[int], why: str,
                   mcf: AllToAllResult | None = None) -> dict:
    """The fallback without a schedule (module docstring): `status` "approximate", the LP (3) bracket and per
    size D the time (D/N) / (f B/d) at f = the bracket's lower end (`mcf_bound_us`, what is charged) and at its
    upper end (`mcf_bound_low_us`). `why` says why there is no schedule."""
    mcf = mcf if mcf is not None else alltoall_throughput(topo)
    n, d = topo.nodes, topo.degree

    def at(f: float, size: int) -> float:
        return alltoall_time_s(f, n, d, size, link.node_bandwidth_Bps) * 1e6

    return {"status": "approximate", "expr": topo.expr, "verified": False,
            "reason": f"{why}; the all-to-all is priced by its throughput f of LP (3) ({mcf.method}) in "
                      f"[{mcf.lower:.6g}, {mcf.upper:.6g}], charged at the lower end (the upper end of the time)",
            "mcf_throughput": mcf.lower, "mcf_lower": mcf.lower, "mcf_upper": mcf.upper, "mcf_exact": mcf.exact,
            "mcf_method": mcf.method, "mcf_tau": d / (n * mcf.lower), "seconds": mcf.seconds,
            "times_us": {str(s): {"schedule_us": None, "mcf_bound_us": at(mcf.lower, s),
                                  "mcf_bound_low_us": at(mcf.upper, s)} for s in sizes}}
