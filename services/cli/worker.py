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
    from workers.app import celery_app

    argv = ["worker", f"--concurrency={args.concurrency}", f"--loglevel={args.log_level.upper()}",
            "--without-gossip", "--without-mingle"]
    if args.hostname:
        argv.append(f"--hostname={args.hostname}")
    warm_kernels()           # before the pool forks: every child starts with the kernels loaded
    celery_app.worker_main(argv)
    return 0


def register(sub) -> None:
    """Add the `worker` sub-command to the parser's subparsers."""
    p = sub.add_parser("worker", help="run a Celery worker for the scaled deployment (needs FABRICPLAN_BROKER_URL)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--hostname", default=None)
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=run)
