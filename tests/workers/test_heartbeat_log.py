"""A transient database fault during a heartbeat (SQLite locked by another writer) is one line in the log,
with the driver's words and no traceback; the next beat that succeeds says so."""
from __future__ import annotations

import logging
import sqlite3

from sqlalchemy.exc import OperationalError

from services.store import jobs
from workers import tasks


def test_a_locked_database_during_a_heartbeat_logs_one_line(settings, monkeypatch, caplog):
    hb = tasks.Heartbeats()
    hb.jobs[1] = ("plan", "p1", 1)
    calls = {"n": 0}

    def beat(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("UPDATE plans SET heartbeat_at=?", ("x",),
                                   sqlite3.OperationalError("database is locked"))
        return True
    monkeypatch.setattr(jobs, "beat", beat)
    monkeypatch.setattr(jobs, "beat_worker", lambda *a, **k: None)
    with caplog.at_level(logging.WARNING, logger="fabricplan.worker"):
        hb.beat_once()
        hb.beat_once()
    records = [r for r in caplog.records if r.name == "fabricplan.worker"]
    assert len(records) == 2, [r.getMessage() for r in records]
    first, second = records
    assert first.exc_info is None and "\n" not in first.getMessage()
    assert "OperationalError: database is locked" in first.getMessage() and "UPDATE" not in first.getMessage()
    assert "recorded again" in second.getMessage()
