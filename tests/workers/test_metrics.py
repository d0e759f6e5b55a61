"""A Celery worker's metrics (workers.metrics): its processes' multiprocess files summed at a scrape, the files
of processes that are gone folded into one archive per type without changing a number, so a scrape reads a
few files however many processes ran."""
from __future__ import annotations

import multiprocessing
import os

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from workers import metrics


def _pool_process(path: str, durations: list[float]) -> None:
    """What a pool process does: observe job ends into its own files in the worker's directory."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    from prometheus_client import CollectorRegistry, values

    from services.store import job_metrics

    values.ValueClass = values.get_value_class()
    m = job_metrics.JobMetrics(CollectorRegistry())
    for d in durations:
        m.observe(job_metrics.Observation("fabricplan_job_duration_seconds", ("plan", "done"), d))
    m.observe(job_metrics.Observation("fabricplan_revisions", ("failure", "panel"), len(durations)))


def _run(path: str, durations: list[float]) -> None:
    p = multiprocessing.get_context("fork").Process(target=_pool_process, args=(path, durations))
    p.start()
    p.join()
    assert p.exitcode == 0


def _scrape(path: str) -> dict:
    text = generate_latest(metrics.registry(path)).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_processes_files_are_summed_and_folded(tmp_path):
    path = str(tmp_path / "prometheus-worker")
    os.makedirs(path)
    _run(path, [0.2, 3.0])
    _run(path, [40.0])
    assert len(os.listdir(path)) == 4                     # a counter and a histogram file per process
    plan = (("kind", "plan"), ("status", "done"))
    first = _scrape(path)
    assert first[("fabricplan_job_duration_seconds_count", plan)] == 3
    assert first[("fabricplan_job_duration_seconds_sum", plan)] == 43.2
    assert first[("fabricplan_job_duration_seconds_bucket", (("kind", "plan"), ("le", "5.0"), ("status", "done")))] == 2
    assert first[("fabricplan_revisions_total", (("cause", "panel"), ("kind", "failure")))] == 3
    assert first[("fabricplan_job_duration_seconds_count", (("kind", "compile"), ("status", "failed")))] == 0
    assert sorted(os.listdir(path)) == ["counter_archive.db", "histogram_archive.db"]   # both processes gone
    assert _scrape(path) == first                         # folding changed no number
    _run(path, [0.05])
    again = _scrape(path)
    assert again[("fabricplan_job_duration_seconds_count", plan)] == 4
    assert again[("fabricplan_revisions_total", (("cause", "panel"), ("kind", "failure")))] == 4
    assert sorted(os.listdir(path)) == ["counter_archive.db", "histogram_archive.db"]


def test_setup_empties_the_directory(tmp_path, monkeypatch):
    from prometheus_client import values

    path = tmp_path / "prometheus-worker"
    path.mkdir()
    (path / "histogram_999999.db").write_bytes(b"left by an earlier run")
    monkeypatch.setattr(values, "ValueClass", values.ValueClass)         # restored after the test
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "unset")
    assert metrics.setup(path) == str(path) and os.listdir(path) == []
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(path) and values.ValueClass._multiprocess
