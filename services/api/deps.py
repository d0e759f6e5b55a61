"""Request-scoped dependencies: settings, database session (one transaction per request), and the paging
parameters every list endpoint shares."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Query, Request
from sqlalchemy.orm import Session

from services.store.db import session_scope


def get_session(request: Request) -> Iterator[Session]:
    with session_scope(request.app.state.settings.sqlalchemy_url) as s:
        yield s


# Paging of every list endpoint: bounded before any query (an offset beyond a signed 64-bit integer is a
# database error on PostgreSQL, not an empty page).
MAX_PAGE = 1000
MAX_OFFSET = 1 << 31
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"items per page (at most {MAX_PAGE})")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="items to skip")]
