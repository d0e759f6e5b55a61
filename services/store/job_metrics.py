"""Metrics observed when work ends: job durations (plans, evaluations, revisions, compiles), plan stage
durations, XML compile durations and revisions by cause (DESIGN.md section 4, service flow step 8, `/metrics`;
docs/operations.md, Metrics).

A job that finishes, a stage that closes (services.store.stage_events), a compile that is recorded or a
revision that is created calls `observe(s, family, labels, value)` inside its transaction. The observation is
delivered when the transaction commits (a rolled-back transaction observes nothing, so a write refused and
tried again is counted once) to this process's sink (`set_sink`):
- by default this process's own metrics (`local()`): prometheus_client objects, which write to the
  deployment's multiprocess directory (PROMETHEUS_MULTIPROC_DIR) when the service runs several processes,
  so a scrape reads a few files whatever the history (`fabricplan serve --workers N`; a Celery worker's
  pool processes, served by the worker, `services.cli.worker`);
- in an embedded worker's job process, the pipe to its API process (workers.embedded), which observes it
  in turn: the job processes come and go, their API process stays.

Every family is created with its series initialised over the label values known beforehand (job kinds and
outcomes, plan stages, runtimes, revision causes), at 0 until their first observation, so a dashboard's
rate() has a series to draw. `_created` series are disabled: single- and multi-process scrapes give the same
families (multiprocess mode has none).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from sqlalchemy import event
from sqlalchemy.orm import Session

__all__ = ["DURATION_BUCKETS", "FAMILIES", "Family", "JOB_KINDS", "OUTCOMES", "Observation", "PLAN_STAGES",
           "REVISION_CAUSES", "JobMetrics", "deliver", "job_ended", "local", "observe", "set_sink"]

log = logging.getLogger("fabricplan.metrics")
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, float("inf"))
JOB_KINDS = ("plan", "evaluation", "revision", "compile")
OUTCOMES = ("done", "failed")
PLAN_STAGES = ("frontier", "select", "fabric", "schedule", "verify", "store", "alltoall", "compile", "finish")
"""A plan's work stages (services.jobs.stages.stage_weights.FIXED_S without a revision's `repair`)."""
REVISION_CAUSES = (("failure", "scheduler"), ("failure", "panel"), ("restored", "repair"))
"""(kind, cause) of the revisions there can be: failures reported by a scheduler or a panel, and the restored
revision a repair applied on every panel adds (services.jobs.requests.failure_reports)."""
_KEY = "fabricplan_observations"


def _runtimes() -> tuple[str, ...]:
    from services.compiler.runtimes.names import Runtime

    return tuple(r.value for r in Runtime)


@dataclass(frozen=True)
class Family:
    """One metric family: histogram (durations in seconds) or counter, its labels and the label values it is
    initialised over."""
    name: str
    kind: str
    doc: str
    labels: tuple[str, ...]
    initial: Callable[[], tuple[tuple[str, ...], ...]]


FAMILIES = {f.name: f for f in (
    Family("fabricplan_job_duration_seconds", "histogram", "finished jobs: created to finished (queue wait "
           "included), by kind and status", ("kind", "status"),
           lambda: tuple((k, o) for k in JOB_KINDS for o in OUTCOMES)),
    Family("fabricplan_plan_stage_duration_seconds", "histogram", "time plans spent in each stage (from the "
           "start of the stage to its end)", ("stage",), lambda: tuple((st,) for st in PLAN_STAGES)),
    Family("fabricplan_compile_duration_seconds", "histogram", "XML compiles (fit search, lowering, check), by "
           "runtime and outcome", ("runtime", "status"),
           lambda: tuple((r, o) for r in _runtimes() for o in OUTCOMES)),
    Family("fabricplan_revisions", "counter", "plan revisions by kind and cause (scheduler or panel reports of "
           "failed links, repairs)", ("kind", "cause"), lambda: REVISION_CAUSES),
)}


@dataclass(frozen=True)
class Observation:
    """A value observed on a family's series (a histogram's duration, a counter's increment)."""
    family: str
    labels: tuple[str, ...]
    value: float


class JobMetrics:
    """The families as prometheus_client objects in `registry`, every known series initialised at 0."""

    def __init__(self, registry=None):
        from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

        disable_created_metrics()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = {}
        for f in FAMILIES.values():
            if f.kind == "histogram":
                m = Histogram(f.name, f.doc, list(f.labels), buckets=DURATION_BUCKETS, registry=self.registry)
            else:
                m = Counter(f.name, f.doc, list(f.labels), registry=self.registry)
            for labels in f.initial():
                m.labels(*labels)
            self.metrics[f.name] = m

    def observe(self, obs: Observation) -> None:
        m = self.metrics[obs.family].labels(*obs.labels)
        if FAMILIES[obs.family].kind == "histogram":
            m.observe(max(0.0, obs.value))
        else:
            m.inc(obs.value)


_local: JobMetrics | None = None
_sink: Callable[[Observation], None] | None = None


def local() -> JobMetrics:
    """This process's families (created on first use: after PROMETHEUS_MULTIPROC_DIR is set, which must come
    before prometheus_client is imported)."""
    global _local
    if _local is None:
        _local = JobMetrics()
    return _local


def set_sink(sink: Callable[[Observation], None] | None) -> None:
    """Where this process delivers committed observations (None: its own metrics, `local()`)."""
    global _sink
    _sink = sink


def deliver(obs: Observation) -> None:
    """An observation to this process's sink; a metric never fails the work it measures."""
    try:
        (_sink or local().observe)(obs)
    except Exception as exc:
        log.warning("metric %s not observed: %s: %s", obs.family, type(exc).__name__, exc)


def observe(s: Session, family: str, labels: tuple[str, ...] | list[str], value: float) -> None:
    """Observe `value` on `family`'s series `labels` when the transaction of `s` commits."""
    if family not in FAMILIES:
        raise KeyError(family)
    s.info.setdefault(_KEY, []).append(Observation(family, tuple(str(x) for x in labels), float(value)))


def job_ended(s: Session, kind: str, status: str, created_at: datetime | None,
              now: datetime | None = None) -> None:
    """A job of `kind` ended `status` (done, failed): its duration from its creation, queue wait included."""
    if created_at is None:
        return
    now = now or datetime.now(timezone.utc)
    if created_at.tzinfo is None:       # SQLite hands datetimes back without their zone: stored in UTC
        created_at = created_at.replace(tzinfo=timezone.utc)
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    observe(s, "fabricplan_job_duration_seconds", (kind, status), (now - created_at).total_seconds())


@event.listens_for(Session, "after_commit")
def _deliver(session: Session) -> None:
    for obs in session.info.pop(_KEY, None) or ():
        deliver(obs)


@event.listens_for(Session, "after_soft_rollback")
def _discard(session: Session, previous_transaction) -> None:
    if previous_transaction.parent is None:
        session.info.pop(_KEY, None)
