"""Prometheus metrics of the service (GET /metrics; docs/grafana-dashboard.json charts them).

A scrape costs the same whatever the history the database holds:
- counters and histograms are observed when their event happens, never rebuilt from the history: in the API
  processes request latency, plans accepted and panel reports by status (`Metrics`); where work ends, the job,
  plan-stage and compile durations and the revisions by cause (services.store.job_metrics: an embedded job
  process hands its observations to its API process; the scaled deployment's Celery workers serve their own,
  services.cli.worker). With several processes (`fabricplan serve --workers N`) they are prometheus_client's
  multiprocess files (PROMETHEUS_MULTIPROC_DIR, set up by the serve command), so a scrape sums every process's
  files whichever process answers it (a process's own numbers alone would look like counter resets);
- state is read from the database at the scrape in a constant number of queries (`DatabaseCollector`):
  plans by status, unfinished jobs and the queue by kind, and the workers alive (embedded: the API processes
  whose worker beat its row within a few sweeps, services.store.jobs.workers_alive, so a killed process stops
  counting; scaled: the Celery workers that answer a ping).

Both modes give the same families: every labelled counter and histogram whose label values are known starts
with its series at 0, no `_created` series (multiprocess mode has none), and a family with no series yet is
left out of both. `render` answers OpenMetrics when the scraper asks for it (Accept:
application/openmetrics-text), else Prometheus text format 0.0.4.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from services.store import job_metrics

__all__ = ["Metrics", "DatabaseCollector", "scrape_registry", "render", "multiprocess_dir", "mark_process_dead",
           "PANEL_STATUSES"]

log = logging.getLogger("fabricplan.metrics")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PANEL_STATUSES = ("applied", "degraded", "failed")
PING_CACHE_S = 5.0              # the Celery workers' ping (up to PING_TIMEOUT_S) is asked at most this often
PING_TIMEOUT_S = 1.0

disable_created_metrics()


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


class Metrics:
    """The metrics the API processes count (one instance per app; multiprocess-safe when the env is set). The
    families observed where work ends are created here too, so every API process has their series at 0."""

    def __init__(self, embedded_worker: bool = False):
        self.registry = CollectorRegistry()
        self.requests = Histogram("fabricplan_http_request_seconds", "HTTP request latency",
                                  ["method", "route", "status"], registry=self.registry)
        self.plans_created = Counter("fabricplan_plans_created_total", "plans accepted", registry=self.registry)
        self.panel_reports = Counter("fabricplan_panel_reports_total", "panel state reports accepted, by status",
                                     ["status"], registry=self.registry)
        for status in PANEL_STATUSES:
            self.panel_reports.labels(status)
        self.job_metrics = job_metrics.local()


def scrape_registry(metrics: Metrics, database: "DatabaseCollector | None") -> CollectorRegistry:
    """What a scrape reads: every process's files in multiprocess mode, else this process's registries; plus
    the database's state."""
    registry = CollectorRegistry()
    mp = multiprocess_dir()
    if mp:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=mp)
    else:
        registry.register(_Forward(metrics.registry, metrics.job_metrics.registry))
    if database is not None:
        registry.register(database)
    return registry


def render(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """(body, content type): OpenMetrics when `accept` asks for application/openmetrics-text, else the
    Prometheus text format."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def mark_process_dead(pid: int | None = None) -> None:
    """A process leaving: drop its live gauges' files (multiprocess mode)."""
    mp = multiprocess_dir()
    if mp:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid(), path=mp)


class _Forward(Collector):
    """This process's registries, without the families that have no series yet (multiprocess mode has no file
    entry for them)."""

    def __init__(self, *registries: CollectorRegistry):
        self.registries = registries

    def collect(self):
        for registry in self.registries:
            yield from (family for family in registry.collect() if family.samples)


class DatabaseCollector(Collector):
    """State counted by the database at each scrape, in a constant number of queries (plans by status: one;
    unfinished jobs by kind and status: one a kind; workers alive: one, or a Celery ping)."""

    def __init__(self, url: str, broker_url: str | None = None, alive_within_s: float = 10.0):
        self.url, self.broker_url, self.alive_within_s = url, broker_url, alive_within_s
        self.lock = threading.Lock()
        self.pinged: tuple[float, int | None] | None = None

    def describe(self):
        return []

    def collect(self):
        try:
            families = list(self._families())
        except Exception as exc:  # the database is down: /readyz says so; serve the other metrics
            log.warning("database metrics unavailable: %s: %s", type(exc).__name__, exc)
            return
        yield from families

    def _families(self):
        from services.store import jobs, repo
        from services.store.db import session_scope

        with session_scope(self.url) as s:
            plans = repo.plans_by_status(s)
            unfinished = jobs.counts(s)
            alive = None if self.broker_url else jobs.workers_alive(s, self.alive_within_s, "embedded")
        if self.broker_url:
            alive = self._celery_workers()
        g = GaugeMetricFamily("fabricplan_plans", "plans by status", labels=["status"])
        for status, n in plans.items():
            g.add_metric([status], n)
        yield g
        g = GaugeMetricFamily("fabricplan_jobs", "unfinished jobs (plan, evaluation, compile, revision) by status",
                              labels=["kind", "status"])
        for kind, per in unfinished.items():
            for status, n in per.items():
                g.add_metric([kind, status], n)
        yield g
        g = GaugeMetricFamily("fabricplan_queue_depth", "jobs queued and not started, by kind", labels=["kind"])
        for kind, per in unfinished.items():
            g.add_metric([kind], per.get("queued", 0))
        yield g
        if alive is not None:
            g = GaugeMetricFamily("fabricplan_workers_alive", "workers running jobs (embedded: one per API process; "
                                  "scaled: Celery workers answering a ping)")
            g.add_metric([], alive)
            yield g

    def _celery_workers(self) -> int | None:
        """Scaled deployment: the Celery workers that answer a ping (None when the broker does not answer),
        asked at most every PING_CACHE_S."""
        with self.lock:
            if self.pinged is not None and time.monotonic() - self.pinged[0] < PING_CACHE_S:
                return self.pinged[1]
            try:
                from workers.app import celery_app

                alive: int | None = len(celery_app.control.ping(timeout=PING_TIMEOUT_S) or [])
            except Exception:
                alive = None
            self.pinged = (time.monotonic(), alive)
            return alive
