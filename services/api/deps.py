"""Request-scoped dependencies: settings, database session (one transaction per request)."""
from __future__ import annotations

from collections.abc import Iterator

from fastapi import Request
from sqlalchemy.orm import Session

from services.store.db import session_scope


def get_session(request: Request) -> Iterator[Session]:
    with session_scope(request.app.state.settings.sqlalchemy_url) as s:
        yield s
