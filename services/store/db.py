"""Engine and session factory; schema via Alembic only (migrate())."""
from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        eng = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(eng, "connect")
        def _pragmas(dbapi_conn, _):          # WAL: readers do not block the writer
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
        return eng
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, connect_args={"connect_timeout": 5})


@lru_cache(maxsize=8)
def session_factory(url: str) -> sessionmaker[Session]:
    return sessionmaker(bind=engine_for(url), expire_on_commit=False)


@contextmanager
def session_scope(url: str):
    """A transaction: committed on success, rolled back on any error (nothing half-written)."""
    s = session_factory(url)()
    try:
        yield s
        s.commit()
    except BaseException:
        s.rollback()
        raise
    finally:
        s.close()


def alembic_config(url: str):
    """Alembic configuration built in code: the `migrations` package ships with fabricplan, so an installed
    (non-editable) package migrates too; alembic.ini at the repository root is for the alembic CLI."""
    import migrations
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str, revision: str = "head") -> None:
    """Bring the database schema to `revision` (Alembic is the only schema path)."""
    from alembic import command

    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), revision)


def ping(url: str) -> None:
    with engine_for(url).connect() as conn:
        conn.execute(text("SELECT 1"))
