"""Prometheus metrics of the service (GET /metrics; docs/grafana-dashboard.json charts them).

Two sources, so that every process of `fabricplan serve --workers N` answers a scrape with the same numbers:
- counted in the API processes (request latency, plans accepted, panel reports by status): prometheus_client's multiprocess mode when PROMETHEUS_MULTIPROC_DIR is set (the serve command sets
  it up for several processes, services.cli), so a scrape sums every process's files instead of reading the
  one process it landed on (which Prometheus would see as counter resets);
- read from the database at each scrape (`DatabaseCollector`), the source of truth shared by all processes
  and by the workers of the scaled deployment: queue depth by job kind, job and
  plan-stage durations, compile durations, revisions by cause, and the workers alive (embedded: the API
  processes whose worker beat its row within a few sweeps, services.store.jobs.workers_alive, so a killed
  process stops counting; scaled: the Celery workers that answer a ping). Durations are cumulative histograms over the finished jobs the database holds (they grow as jobs
  finish and never reset), computed from the rows' timestamps and the compile's own `seconds`.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["Metrics", "DatabaseCollector", "scrape_registry", "multiprocess_dir", "mark_process_dead",
           "DURATION_BUCKETS"]

log = logging.getLogger("fabricplan.metrics")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, float("inf"))
CACHE_S = 5.0                   # database-derived metrics are recomputed at most this often per process
PING_TIMEOUT_S = 1.0


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


class Metrics:
    """The metrics the API processes count (one instance per app; multiprocess-safe when the env is set)."""

    def __init__(self, embedded_worker: bool = False):
        self.registry = CollectorRegistry()
        self.requests = Histogram("fabricplan_http_request_seconds", "HTTP request latency",
                                  ["method", "route", "status"], registry=self.registry)
        self.plans_created = Counter("fabricplan_plans_created_total", "plans accepted", registry=self.registry)
        self.plans_by_status = Gauge("fabricplan_plans", "plans by status", ["status"], registry=self.registry,
                                     multiprocess_mode="mostrecent")
        self.jobs = Gauge("fabricplan_jobs", "unfinished jobs (plan, evaluation, compile, revision) by status",
                          ["kind", "status"], registry=self.registry, multiprocess_mode="mostrecent")
        self.panel_reports = Counter("fabricplan_panel_reports_total", "panel state reports accepted, by status",
                                     ["status"], registry=self.registry)
        self.embedded_workers = None     # counted by DatabaseCollector from the workers' rows (both deployments)


    def set_plans_by_status(self, counts: dict[str, int]) -> None:
        """The fabricplan_plans gauge (plans by status), refreshed whenever the counts are read."""
        for status, n in counts.items():
            self.plans_by_status.labels(status).set(n)


    def set_jobs(self, counts: dict[str, dict[str, int]]) -> None:
        """The fabricplan_jobs gauge (unfinished jobs by kind and status: queued, running)."""
        for kind, per in counts.items():
            for status, n in per.items():
                self.jobs.labels(kind, status).set(n)


def scrape_registry(metrics: Metrics, database: "DatabaseCollector | None") -> CollectorRegistry:
    """What a scrape reads: every process's files in multiprocess mode, else this process's registry; plus
    the database's metrics."""
    mp = multiprocess_dir()
    if mp:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=mp)
    else:
        registry = CollectorRegistry()
        registry.register(_Forward(metrics.registry))
    if database is not None:
        registry.register(database)
    return registry


def mark_process_dead(pid: int | None = None) -> None:
    """A process leaving: drop its live gauges' files (multiprocess mode)."""
    mp = multiprocess_dir()
    if mp:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid(), path=mp)


class _Forward(Collector):
    def __init__(self, registry: CollectorRegistry):
        self.registry = registry

    def collect(self):
        yield from self.registry.collect()


class DatabaseCollector(Collector):
    """Metrics counted by the database at scrape time (cached CACHE_S): see the module docstring."""

    def __init__(self, url: str, broker_url: str | None = None, alive_within_s: float = 10.0):
        self.url, self.broker_url, self.alive_within_s = url, broker_url, alive_within_s
        self.lock = threading.Lock()
        self.cached: tuple[float, list] | None = None
        self.workers: tuple[float, int | None] | None = None

    def describe(self):
        return []

    def collect(self):
        with self.lock:
            if self.cached is None or time.monotonic() - self.cached[0] > CACHE_S:
                try:
                    self.cached = (time.monotonic(), list(self._families()))
                except Exception as exc:  # the database is down: /readyz says so; serve the other metrics
                    log.warning("database metrics unavailable: %s: %s", type(exc).__name__, exc)
                    return
            families = self.cached[1]
        yield from families

    def _families(self):
        from sqlalchemy import func, select

        from services.store.db import session_scope
        from services.store.jobs import KINDS, workers_alive
        from services.store.models import CompileJob, PlanEvent, PlanRevision

        queue = GaugeMetricFamily("fabricplan_queue_depth", "jobs queued and not started, by kind", labels=["kind"])
        durations = _Histograms("fabricplan_job_duration_seconds", "finished jobs: created to finished (queue wait "
                                "included), by kind and status", ["kind", "status"])
        stages = _Histograms("fabricplan_plan_stage_duration_seconds", "time plans spent in each stage (from their "
                             "status events)", ["stage"])
        compiles = _Histograms("fabricplan_compile_duration_seconds", "XML compiles (fit search, lowering, check), "
                               "by runtime and outcome", ["runtime", "status"])
        revisions = CounterMetricFamily("fabricplan_revisions", "plan revisions by kind and cause (scheduler or "
                                        "panel reports of failed links, repairs)", labels=["kind", "cause"])
        with session_scope(self.url) as s:
            for kind, model in KINDS.items():
                counts = dict(s.execute(select(model.status, func.count()).group_by(model.status)).all())
                queue.add_metric([kind], counts.get("queued", 0))
                for status, created, updated in s.execute(
                        select(model.status, model.created_at, model.updated_at)
                        .where(model.status.in_(("done", "failed")))):
                    durations.observe([kind, status], (updated - created).total_seconds())
            prev = (None, None, None)           # (plan, at, stage) of the previous event
            # the plan's own status events: not the events closing a stage (services.store.stage_events: they
            # share their instant with the next stage's start, which would count every stage twice) nor a
            # revision's stages (`rev<n>:<stage>`: a label per revision number)
            for plan_id, at, stage in s.execute(select(PlanEvent.plan_id, PlanEvent.at, PlanEvent.stage)
                                                .where(PlanEvent.ended_at.is_(None),
                                                       PlanEvent.stage.not_like("rev%:%"))
                                                .order_by(PlanEvent.plan_id, PlanEvent.id)):
                if prev[0] == plan_id:          # the previous stage lasted until this event
                    stages.observe([prev[2]], (at - prev[1]).total_seconds())
                prev = (plan_id, at, stage)
            for status, spec, meta in s.execute(select(CompileJob.status, CompileJob.spec, CompileJob.meta)
                                                .where(CompileJob.status.in_(("done", "failed")))):
                meta = meta or {}
                if isinstance(meta.get("seconds"), (int, float)):
                    runtime = meta.get("runtime") or (spec or {}).get("runtime") or "unknown"
                    compiles.observe([str(runtime), status], float(meta["seconds"]))
            by_cause: dict[tuple[str, str], int] = defaultdict(int)
            for kind, cause in s.execute(select(PlanRevision.kind, PlanRevision.cause)):
                by_cause[(kind, str((cause or {}).get("source", "unknown")))] += 1
            for (kind, cause), n in sorted(by_cause.items()):
                revisions.add_metric([kind, cause], n)
        yield from (queue, durations.family(), stages.family(), compiles.family(), revisions)
        if self.broker_url:
            alive = self._celery_workers()
        else:   # embedded: the API processes whose worker beat its row lately (a killed one stops counting)
            with session_scope(self.url) as s:
                alive = workers_alive(s, self.alive_within_s, "embedded")
        if alive is not None:
            g = GaugeMetricFamily("fabricplan_workers_alive", "workers running jobs (embedded: one per API process; "
                                  "scaled: Celery workers answering a ping)")
            g.add_metric([], alive)
            yield g

    def _celery_workers(self) -> int | None:
        """Scaled deployment: the Celery workers that answer a ping (None in embedded mode or when the
        broker does not answer)."""
        if not self.broker_url:
            return None
        try:
            from workers.app import celery_app

            return len(celery_app.control.ping(timeout=PING_TIMEOUT_S) or [])
        except Exception:
            return None


class _Histograms:
    """Cumulative histograms (one per label set) built from observed values, as a metric family."""

    def __init__(self, name: str, doc: str, labels: list[str]):
        self.name, self.doc, self.labels = name, doc, labels
        self.values: dict[tuple, list[float]] = defaultdict(list)

    def observe(self, labels: list[str], value: float) -> None:
        self.values[tuple(labels)].append(max(0.0, value))

    def family(self) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        for labels, values in sorted(self.values.items()):
            buckets = [(floatToGoString(b), sum(1 for v in values if v <= b)) for b in DURATION_BUCKETS]
            fam.add_metric(list(labels), buckets, sum(values))
        return fam

