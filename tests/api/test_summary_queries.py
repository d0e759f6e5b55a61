"""Fabric and panel summaries cost a constant number of SQL statements whatever the number of panels (counted
with an SQLAlchemy event listener, not timed), and a fabric layout too large for its panels is refused from
its numbers before it is built. On SQLite and PostgreSQL."""
from __future__ import annotations

import threading
from contextlib import contextmanager

from sqlalchemy import event

from services.store.db import engine_for


@contextmanager
def statements(url: str):
    """The SQL statements the block's requests execute on the service's engine (the dispatcher's sweeps and
    the change feed's reads run in threads of their own, named fabricplan-...)."""
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):
        if not threading.current_thread().name.startswith("fabricplan-"):     # not the service's own threads
            seen.append(statement)
    eng = engine_for(url)
    event.listen(eng, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(eng, "before_cursor_execute", count)


def _register(client, fid: str, ports_per_host: int) -> None:
    r = client.post("/v1/fabrics", json={"id": fid, "layout": "planes", "hosts": 4, "ports_per_host": ports_per_host,
                                         "panel_prefix": f"{fid}-p"})
    assert r.status_code == 201, r.text


def _counts(client, url: str) -> tuple[int, int, int]:
    with statements(url) as fabrics_q:
        assert client.get("/v1/fabrics").status_code == 200
    with statements(url) as panels_q:
        assert client.get("/v1/panels").status_code == 200
    with statements(url) as one_q:
        assert client.get("/v1/fabrics/a").status_code == 200
    return len(fabrics_q), len(panels_q), len(one_q)


def test_summaries_cost_the_same_statements_for_2_or_64_panels(client, settings):
    url = settings.sqlalchemy_url
    _register(client, "a", 2)
    small = _counts(client, url)
    _register(client, "b", 64)
    _register(client, "c", 32)
    large = _counts(client, url)
    assert large == small, (small, large)


def test_a_layout_too_large_for_its_panels_is_refused_before_it_is_built(client, monkeypatch):
    from services.api.routes import fabrics as route

    def never(*args, **kwargs):
        raise AssertionError("the layout was built")
    monkeypatch.setattr(route, "shared_panel_fabric", never)
    monkeypatch.setattr(route, "planes_fabric", never)
    r = client.post("/v1/fabrics", json={"id": "big", "layout": "shared", "hosts": 16384, "ports_per_host": 4})
    assert r.status_code == 422 and r.json()["field"] == "hosts" and "max_ports" in r.json()["detail"], r.text
    r = client.post("/v1/fabrics", json={"id": "big", "layout": "planes", "hosts": 16384, "ports_per_host": 4})
    assert r.status_code == 422 and r.json()["errors"][0]["type"] == "too_many_ports", r.text
