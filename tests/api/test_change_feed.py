"""The processes of an embedded `serve --workers N` follow each other's changes (services.api.notify.
ChangeFeed over services.store.notify's SQLite feed): a finished plan cached by one process is dropped when
another commits a change to it (a panel reporting failed), and waiters are woken. On SQLite (PostgreSQL has
LISTEN/NOTIFY, tests/test_panel_protocol.py)."""
from __future__ import annotations

import pytest

from services.api.notify import ChangeFeed, Hub
from services.api.routes.plans import PlanCache
from services.store import notify
from services.store.db import migrate, session_scope

from tests.conftest import database_url


@pytest.fixture
def url(tmp_path):
    u = database_url("sqlite", tmp_path, "feed", migrated=True)
    migrate(u)
    return u


def _commit_elsewhere(url: str, channel: str, key: str) -> None:
    """A change committed by another process of the deployment (another origin, no sink of ours)."""
    mine = notify.origin()
    notify.set_origin("another-process")
    try:
        with session_scope(url) as s:
            notify.changed(s, channel, key)
    finally:
        notify.set_origin(mine)


def test_another_process_change_drops_the_cached_plan_and_wakes_waiters(url):
    hub, cache, heard = Hub(), PlanCache(), []
    hub.on_change(cache.changed)
    hub.on_change(lambda c, k: heard.append((c, k)))
    feed = ChangeFeed(url, hub)
    assert feed.poll() == 0                                   # starts at the newest change
    cache.put(("p1", "http://x"), (b"{}", '"etag"'))
    cache.put(("p2", "http://x"), (b"{}", '"etag"'))
    _commit_elsewhere(url, "plan", "p1")
    assert feed.poll() == 1 and heard == [("plan", "p1")]
    assert cache.get(("p1", "http://x")) is None and cache.get(("p2", "http://x")) is not None
    assert feed.poll() == 0                                   # each change once


def test_a_process_does_not_hear_its_own_changes_twice(url):
    hub, heard = Hub(), []
    hub.on_change(lambda c, k: heard.append((c, k)))
    feed = ChangeFeed(url, hub)
    feed.poll()
    with session_scope(url) as s:                             # delivered to this process by its sink already
        notify.changed(s, "panel", "x")
    assert feed.poll() == 0 and heard == []


def test_a_rolled_back_change_is_not_in_the_feed(url):
    hub, heard = Hub(), []
    hub.on_change(lambda c, k: heard.append((c, k)))
    feed = ChangeFeed(url, hub)
    feed.poll()
    with pytest.raises(RuntimeError):
        with session_scope(url) as s:
            notify.changed(s, "plan", "p1")
            raise RuntimeError("rolled back")
    _commit_elsewhere(url, "panel", "q")
    assert feed.poll() == 1 and heard == [("panel", "q")]
