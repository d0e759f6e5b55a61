"""`fabricplan serve`: the HTTP API (and the embedded worker unless a broker is configured).
"""
from __future__ import annotations

import os
import sys

__all__ = ["register", "run"]


def run(args) -> int:
    import uvicorn

    from services.api.app import create_app
    from services.config import get_settings

    st = get_settings()
    mode = "embedded (SQLite + in-process worker)" if st.embedded else f"broker {st.broker_url.split('@')[-1]}"
    print(f"fabricplan: serving on http://{args.host}:{args.port} - {mode}; database "
          f"{st.sqlalchemy_url.split('@')[-1]}", file=sys.stderr)
    # no kernels here: the embedded worker's fork server loads them in the background (workers.preload) while
    # the API answers, and a scaled deployment's workers load their own
    # the standard library's event loop, not uvloop: under 50 busy keep-alive connections uvloop left some of
    # them waiting (p99 24-124 ms on /healthz in most 4 s wrk runs, at the same throughput) where asyncio's
    # loop answers every connection in turn (p99 9-17 ms, bench.service; README)
    common = dict(host=args.host, port=args.port, log_level=args.log_level, access_log=False, loop="asyncio")
    if args.workers > 1:      # several processes: uvicorn needs the factory's import path
        if st.embedded:       # once, here: processes migrating one SQLite file at once race on CREATE TABLE
            from services.store.db import migrate

            migrate(st.sqlalchemy_url)
        path = _multiprocess_metrics(st)
        print(f"fabricplan: {args.workers} processes; metrics summed over them in {path}", file=sys.stderr)
        uvicorn.run("services.api.app:create_app", factory=True, workers=args.workers, **common)
    else:
        uvicorn.run(create_app(st), **common)
    return 0


def _multiprocess_metrics(st) -> str:
    """prometheus_client's multiprocess mode for `serve --workers N`: every process writes its counters to
    files in PROMETHEUS_MULTIPROC_DIR (default: <data_dir>/prometheus) and a scrape sums them. The directory
    is emptied first: files left by an earlier run would be counted again."""
    import shutil
    from pathlib import Path

    path = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or Path(st.data_dir) / "prometheus")
    if path.exists():
        for entry in path.iterdir():
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)      # inherited by uvicorn's worker processes
    return str(path)


def register(sub) -> None:
    """Add the `serve` sub-command to the parser's subparsers."""
    p = sub.add_parser("serve", help="run the HTTP API (and the embedded worker unless a broker is configured)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="info")
    p.add_argument("--workers", type=int, default=1, help="API processes (each embedded one runs its own worker)")
    p.set_defaults(func=run)
