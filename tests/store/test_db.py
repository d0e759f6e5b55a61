"""services.store.db: sessions always run on the engine `engine_for` gives for their URL, also after that engine
was dropped from its cache (more URLs than the cache holds, as in a long test session or several data dirs)."""
from __future__ import annotations

from sqlalchemy import event, text

from services.store.db import engine_for, session_factory, session_scope


def test_sessions_use_the_current_engine_after_the_cache_dropped_it(tmp_path):
    first = f"sqlite:///{tmp_path / 'first.db'}"
    assert session_factory(first).kw["bind"] is engine_for(first)
    for i in range(engine_for.cache_info().maxsize + 1):       # push `first` out of the engine cache
        engine_for(f"sqlite:///{tmp_path / f'other{i}.db'}")
    engine = engine_for(first)                                 # a new engine for the same URL
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda conn, cur, statement, *_: seen.append(statement))
    with session_scope(first) as s:
        s.execute(text("SELECT 1"))
    assert session_factory(first).kw["bind"] is engine and "SELECT 1" in seen
