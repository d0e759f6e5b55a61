"""`fabricplan worker`: a Celery worker of the scaled deployment (needs FABRICPLAN_BROKER_URL).
"""
from __future__ import annotations

from .common import UsageError, warm_kernels

__all__ = ["register", "run"]


def run(args) -> int:
    from services.config import get_settings

    st = get_settings()
    if st.embedded:
        raise UsageError("fabricplan worker needs FABRICPLAN_BROKER_URL (the embedded service runs its own worker)")
    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"--metrics-port must be a port number (0: no metrics), got {args.metrics_port}")
    if args.metrics_port:
        _serve_metrics(st, args.metrics_port)
    from workers.app import celery_app

    argv = ["worker", f"--concurrency={args.concurrency}", f"--loglevel={args.log_level.upper()}",
            "--without-gossip", "--without-mingle"]
    if args.hostname:
        argv.append(f"--hostname={args.hostname}")
    warm_kernels()           # before the pool forks: every child starts with the kernels loaded
    celery_app.worker_main(argv)
    return 0


def _serve_metrics(st, port: int) -> None:
    """The job families this worker's processes observe (workers.metrics), in multiprocess files under
    PROMETHEUS_MULTIPROC_DIR (default <data dir>/prometheus-worker, emptied now), served on `port`; a pool
    process that exits is marked dead."""
    import os
    import sys
    from pathlib import Path

    from celery.signals import worker_process_shutdown

    from workers import metrics

    path = metrics.setup(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or Path(st.data_dir) / "prometheus-worker")
    worker_process_shutdown.connect(lambda **_: metrics.mark_process_dead(), weak=False)
    metrics.serve(port, path)
    print(f"fabricplan: worker metrics on :{port} from {path}", file=sys.stderr)


def register(sub) -> None:
    """Add the `worker` sub-command to the parser's subparsers."""
    p = sub.add_parser("worker", help="run a Celery worker for the scaled deployment (needs FABRICPLAN_BROKER_URL)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--hostname", default=None)
    p.add_argument("--log-level", default="info")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve the job, stage and compile durations this worker observes for Prometheus on this "
                        "port (default 0: not served)")
    p.set_defaults(func=run)
