"""The issue's bombs against a real server process (`fabricplan serve`, on SQLite and PostgreSQL): each answers
4xx in under 2 s, the server's peak RSS stays under 1 GiB, and /healthz answers throughout."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import BACKENDS, HANG_S, MINIMAL, database_url
from tests.served import served, service_env

BOMBS = [
    ("POST", "/v1/topologies/evaluate", {"expr": "line(ring(2), 1000000000)"}),
    ("POST", "/v1/topologies/evaluate", {"expr": "product(torus(16,16),torus(16,16),torus(16,16))"}),
    ("POST", "/v1/topologies/evaluate", {"expr": "power(complete(64), 4)"}),
    ("POST", "/v1/topologies/evaluate", {"expr": "product(torus(8,8),torus(8,8),torus(8,8),torus(4,4))"}),
    ("POST", "/v1/topologies/evaluate", {"expr": "genkautz(62, 1024000)"}),
    ("POST", "/v1/fabrics", {"id": "bomb", "layout": "planes", "hosts": 1_000_000, "ports_per_host": 64}),
    ("POST", "/v1/fabrics", {"id": "bomb", "layout": "shared", "hosts": 100_000, "ports_per_host": 64}),
    ("POST", "/v1/plans", {**MINIMAL, "workload": {"collective": "allreduce", "sizes_bytes": [10 ** 400]}}),
    ("POST", "/v1/plans", {**MINIMAL, "workload": {"collective": "allreduce", "sizes_bytes": [1], "weights": [1e308]}}),
]


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(params=BACKENDS)
def server(request, tmp_path):
    url = database_url(request.param, tmp_path, "bombs", migrated=True)
    env = service_env(tmp_path, FABRICPLAN_DATABASE_URL=url)
    with served(env) as (base, proc):
        yield base, proc


def test_bombs_answer_4xx_and_the_server_stays_small(server):
    base, proc = server
    with httpx.Client(base_url=base, timeout=HANG_S) as c:
        for method, path, body in BOMBS:
            r = c.request(method, path, json=body)
            assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text[:300])
            assert c.get("/healthz").status_code == 200
        big = b'{"id": "x", "panels": [], "hosts": [' + b'{"id": "h", "ports": []},' * 400_000 + b'{}]}'
        r = c.post("/v1/fabrics", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413
    assert proc.poll() is None
    assert _peak_rss(proc.pid) < 1 << 30
