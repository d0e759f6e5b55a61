"""A Celery worker's metrics (scaled deployment): what its processes observed when work ended (services.store.
job_metrics: job, plan-stage and compile durations, revisions), served by the worker's main process on
`fabricplan worker --metrics-port` for Prometheus to scrape beside the API's /metrics.

The worker's processes (the pool's, and the compile processes they fork) write prometheus_client's
multiprocess files in the worker's own directory (`setup`: emptied at start). A process that ended leaves its
files; so that a scrape reads a few files however many processes ran, each scrape first folds the files of
the processes that are gone into one archive per type (`compact`: counters and histograms only; their sums
are what a scrape reports, so folding them changes no number), and a pool process that exits is marked dead
(`mark_process_dead`: its live gauges' files, if any, go).
"""
from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import threading
from pathlib import Path

__all__ = ["setup", "compact", "registry", "serve", "mark_process_dead"]

log = logging.getLogger("fabricplan.metrics")
ARCHIVE = "archive"
_lock = threading.Lock()


def setup(path: str | Path) -> str:
    """This worker's multiprocess directory, emptied (files of an earlier run would be counted again), in the
    environment of the processes it starts, and prometheus_client switched to it even if already imported."""
    path = Path(path)
    if path.exists():
        for entry in path.iterdir():
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    from prometheus_client import values

    values.ValueClass = values.get_value_class()        # chosen at import: choose again with the directory set
    return str(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def compact(path: str) -> int:
    """Fold the counter and histogram files of processes that are gone into `<type>_archive.db`; returns the
    files folded."""
    from prometheus_client.mmap_dict import MmapedDict
    from prometheus_client.multiprocess import MultiProcessCollector

    folded = 0
    with _lock:
        for typ in ("counter", "histogram"):
            dead = []
            for f in glob.glob(os.path.join(path, f"{typ}_*.db")):
                pid = Path(f).stem.split("_", 1)[1]
                if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                    dead.append(f)
            if not dead:
                continue
            archive = os.path.join(path, f"{typ}_{ARCHIVE}.db")
            files = dead + ([archive] if os.path.exists(archive) else [])
            merged = MultiProcessCollector.merge(files, accumulate=False)
            tmp = os.path.join(path, f".{typ}_{ARCHIVE}.tmp")     # not *.db: no scrape reads it half-written
            out = MmapedDict(tmp)
            try:
                for metric in merged:
                    for s in metric.samples:
                        key = json.dumps([metric.name, s.name, s.labels, metric.documentation], sort_keys=True)
                        out.write_value(key, s.value, 0.0)
            finally:
                out.close()
            os.replace(tmp, archive)
            for f in dead:
                os.remove(f)
            folded += len(dead)
    return folded


class _Compacting:
    """The directory's metrics, its dead processes' files folded first."""

    def __init__(self, path: str):
        from prometheus_client.multiprocess import MultiProcessCollector

        self.path = path
        self.files = MultiProcessCollector(None, path=path)

    def collect(self):
        try:
            compact(self.path)
        except Exception as exc:             # the files as they are: every number still counted once
            log.warning("metrics files not compacted: %s: %s", type(exc).__name__, exc)
        with _lock:
            return list(self.files.collect())


def registry(path: str):
    """A registry reading the worker's directory (compacting it at each scrape)."""
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry()
    reg.register(_Compacting(path))
    return reg


def serve(port: int, path: str, addr: str = "0.0.0.0") -> None:
    """Serve the directory's metrics on http://addr:port/ (any path; OpenMetrics on Accept) from a thread of
    this process; the job families' series start at 0 in this process's files."""
    from prometheus_client import start_http_server

    from services.store import job_metrics

    job_metrics.local()
    start_http_server(port, addr=addr, registry=registry(path))


def mark_process_dead(pid: int | None = None) -> None:
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid(), path=path)
