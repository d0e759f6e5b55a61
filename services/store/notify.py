"""Change notifications: whoever waits for a panel's next config (a long poll) or for an evaluation's result
is woken when the change commits, not by re-reading the database.

`changed(s, channel, key)` inside a transaction records the change. When the transaction commits it is
delivered to this process's sink (`set_sink`: the API's in-process hub, or an embedded worker process's pipe
to its parent) and, on PostgreSQL, by NOTIFY in the same transaction (one statement for all of the
transaction's changes, sent just before the commit), which PostgreSQL delivers at commit to every process
that LISTENs (services.api.notify) - API processes and workers on other machines included. On SQLite the
changes are rows of the `changes` table written in the same transaction (`origin`: the process, see
`set_origin`), which every API process of the deployment reads (services.api.notify.ChangeFeed): the
processes of `serve --workers N` drop their caches and wake their waiters on each other's changes.
A rolled-back transaction notifies nobody.
"""
from __future__ import annotations

import os
import secrets
from typing import Callable

from sqlalchemy import event, insert, text
from sqlalchemy.orm import Session

__all__ = ["PG_CHANNEL", "changed", "set_sink", "parse_payload", "origin", "set_origin"]

PG_CHANNEL = "fabricplan"
_KEY = "fabricplan_changes"
_sink: Callable[[str, str], None] | None = None
_origin: tuple[int, str] | None = None


def origin() -> str:
    """This process's name in the SQLite change feed (a job process of the embedded worker takes its API
    process's: its changes reach that process through its pipe)."""
    global _origin
    if _origin is None or _origin[0] != os.getpid():
        _origin = (os.getpid(), f"{os.getpid()}:{secrets.token_hex(6)}")
    return _origin[1]


def set_origin(name: str) -> None:
    global _origin
    _origin = (os.getpid(), name)


def set_sink(sink: Callable[[str, str], None] | None) -> None:
    """Where this process delivers committed changes (channel, key)."""
    global _sink
    _sink = sink


def changed(s: Session, channel: str, key: str) -> None:
    """Record a change of `key` on `channel` ("panel", "evaluation", ...) in the current transaction."""
    s.info.setdefault(_KEY, set()).add((channel, key))


def parse_payload(payload: str) -> tuple[str, str]:
    channel, _, key = payload.partition(":")
    return channel, key


@event.listens_for(Session, "before_commit")
def _notify_postgres(session: Session) -> None:
    """On PostgreSQL, the transaction's changes as NOTIFYs: one round trip however many there are (a
    statement per change used to lengthen transactions that hold a fabric's lock)."""
    changes = session.info.get(_KEY)
    if not changes:
        return
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:c, p) FROM unnest(CAST(:ps AS text[])) AS p"),
                        {"c": PG_CHANNEL, "ps": sorted(f"{ch}:{k}" for ch, k in changes)})
    else:
        from .models import Change, utcnow

        now, me = utcnow(), origin()
        session.execute(insert(Change), [{"channel": ch, "key": k[:200], "origin": me, "at": now}
                                         for ch, k in sorted(changes)])


@event.listens_for(Session, "after_commit")
def _deliver(session: Session) -> None:
    changes = session.info.pop(_KEY, None)
    if changes and _sink is not None:
        for channel, key in changes:
            _sink(channel, key)


@event.listens_for(Session, "after_soft_rollback")
def _discard(session: Session, previous_transaction) -> None:
    if previous_transaction.parent is None:
        session.info.pop(_KEY, None)
