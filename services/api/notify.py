"""Waking waiters in the API process (long polls of panel configs, evaluations awaited by their POST).

`Hub` keeps one future per waiting request, keyed by (channel, key), and wakes them when a change is
published - from any thread: the embedded worker's pipe reader, the PostgreSQL listener, a request that
committed the change itself (services.store.notify delivers committed changes to the hub). Listeners
(`on_change`) see every change too; the panel config cache drops its entry there. A waiter costs nothing
while it waits: no thread, no database read.

`PgListener` LISTENs on PostgreSQL (scaled deployment: changes committed by workers on other machines or by
other API processes) and publishes what it hears. After a reconnect it publishes `resync` so every waiter
re-reads once (notifications sent while it was disconnected are lost).

`ChangeFeed` does the same on SQLite (the embedded deployment, `serve --workers N`): a thread reads the
`changes` rows other processes committed since its last read (every FEED_S; one indexed query) and publishes
them, so a plan's cached body and a panel's long poll in one process follow a change committed in another.
Rows older than FEED_KEEP_S are pruned.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import contextmanager
from typing import Callable

from services.store.notify import PG_CHANNEL, origin, parse_payload

log = logging.getLogger("fabricplan.notify")
RESYNC = ("*", "*")
FEED_S = 0.25
FEED_KEEP_S = 600.0


class Hub:
    def __init__(self):
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiters: dict[tuple[str, str], set[asyncio.Future]] = {}
        self.listeners: list[Callable[[str, str], None]] = []

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def on_change(self, listener: Callable[[str, str], None]) -> None:
        self.listeners.append(listener)

    def publish(self, channel: str, key: str) -> None:
        """Thread-safe: wake every waiter of (channel, key) (of everything for RESYNC)."""
        for fn in self.listeners:
            fn(channel, key)
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._wake, (channel, key))
            except RuntimeError:            # the loop closed meanwhile (shutdown)
                pass

    def _wake(self, k: tuple[str, str]) -> None:
        keys = list(self.waiters) if k == RESYNC else [k]
        for key in keys:
            for fut in self.waiters.pop(key, ()):
                if not fut.done():
                    fut.set_result(True)

    @contextmanager
    def subscription(self, channel: str, key: str):
        """A future that completes at the next change of (channel, key). Subscribe before reading the
        state, so a change between the read and the wait is not missed."""
        fut = asyncio.get_running_loop().create_future()
        self.waiters.setdefault((channel, key), set()).add(fut)
        try:
            yield fut
        finally:
            group = self.waiters.get((channel, key))
            if group is not None:
                group.discard(fut)
                if not group:
                    del self.waiters[(channel, key)]

    def waiting(self) -> int:
        return sum(len(v) for v in self.waiters.values())


async def until(fut: asyncio.Future, timeout: float) -> bool:
    """Wait for a subscription's future at most `timeout` seconds; True if it completed."""
    try:
        await asyncio.wait_for(asyncio.shield(fut), timeout)
        return True
    except asyncio.TimeoutError:
        return False


class PgListener:
    """A thread holding one PostgreSQL connection in LISTEN; reconnects with backoff."""

    def __init__(self, url: str, hub: Hub):
        from sqlalchemy.engine import make_url

        self.dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.hub = hub
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="fabricplan-pg-listener", daemon=True)
        self.connected = threading.Event()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        import psycopg

        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {PG_CHANNEL}")
                    self.connected.set()
                    self.hub.publish(*RESYNC)
                    backoff = 0.5
                    while not self.stop_event.is_set():
                        for n in conn.notifies(timeout=1.0):
                            self.hub.publish(*parse_payload(n.payload))
            except Exception as exc:                    # database away: listen again once it is back
                self.connected.clear()
                log.warning("PostgreSQL listener: %s: %s; reconnecting", type(exc).__name__, exc)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 10.0)


class ChangeFeed:
    """A thread reading the SQLite change feed (services.store.notify) into the hub: changes committed by the
    other processes of the deployment. Starts at the newest row (a process starting has nothing cached)."""

    def __init__(self, url: str, hub: Hub, period_s: float = FEED_S):
        self.url, self.hub, self.period_s = url, hub, period_s
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="fabricplan-change-feed", daemon=True)
        self.cursor: int | None = None
        self.failing = False

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)

    def poll(self) -> int:
        """Publish the changes committed by other processes since the last poll; returns how many."""
        from datetime import datetime, timedelta, timezone

        from sqlalchemy import delete, func, select

        from services.store.db import session_scope
        from services.store.models import Change

        me, n = origin(), 0
        with session_scope(self.url) as s:
            if self.cursor is None:
                self.cursor = s.scalar(select(func.max(Change.id))) or 0
                return 0
            rows = s.execute(select(Change.id, Change.channel, Change.key, Change.origin)
                             .where(Change.id > self.cursor).order_by(Change.id).limit(5000)).all()
            if rows and rows[0][0] % 1000 == 0:
                s.execute(delete(Change).where(
                    Change.at < datetime.now(timezone.utc) - timedelta(seconds=FEED_KEEP_S)))
        for row_id, channel, key, who in rows:
            self.cursor = row_id
            if who != me:
                self.hub.publish(channel, key)
                n += 1
        return n

    def _run(self) -> None:
        while not self.stop_event.wait(self.period_s):
            try:
                self.poll()
                self.failing = False
            except Exception as exc:                     # the database is busy or away: read again next time
                if not self.failing:
                    log.warning("change feed: %s: %s", type(exc).__name__, (str(exc).splitlines() or [""])[0][:200])
                self.failing = True
