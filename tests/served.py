"""The service as a separate process (`fabricplan serve` on a free loopback port), for tests that need a real
server: its own event loop, worker processes, several API processes."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.conftest import HANG_S

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "free_port", "service_env", "served"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(data_dir, **settings) -> dict:
    """This environment without any FABRICPLAN_ / PROMETHEUS_ setting (the numba cache kept), plus `settings`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FABRICPLAN_", "PROMETHEUS_")) or k == "FABRICPLAN_CACHE_DIR"}
    env.update(FABRICPLAN_DATA_DIR=str(data_dir), **settings)
    return env


def _readyz(base: str) -> bool:
    return httpx.get(f"{base}/readyz", timeout=1).status_code == 200


@contextmanager
def served(env: dict, *args: str, ready=_readyz, timeout_s: float = HANG_S):
    """Run `fabricplan serve --host 127.0.0.1 --port <free> *args` until the block ends; yields (base url,
    process) once `ready(base)` holds, and fails with the server's stderr if it exits or `timeout_s` passes."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "services.cli", "serve", "--host", "127.0.0.1", "--port",
                             str(port), "--log-level", "warning", *args], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                if ready(base):
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"fabricplan serve did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            proc.kill()
