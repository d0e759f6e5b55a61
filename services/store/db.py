"""Engine and session factory; schema via Alembic only (migrate()).

Concurrency: a read-modify-write of shared state takes its lock before it reads (`write_lock`: the
fabric's row `SELECT ... FOR UPDATE` on PostgreSQL; on SQLite, whose writers are serialised by one database
lock, an immediate transaction), and a first insert of a natural key is `insert_new` (`INSERT ... ON CONFLICT DO
NOTHING`), so two requests at once never both insert it. A lock is waited for at most LOCK_TIMEOUT_S (SQLite's
busy timeout, PostgreSQL's lock_timeout): then the statement fails with an OperationalError, which the API
answers 503 with Retry-After and a worker retries."""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import create_engine, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["LOCK_TIMEOUT_S", "engine_for", "session_factory", "session_scope", "write_lock", "insert_new",
           "alembic_config", "migrate", "ping", "forget_inherited_engines"]

LOCK_TIMEOUT_S = 4.0        # a request waiting on a lock answers 503 within 5 s


_INHERITED: list[Engine] = []
_urls_seen: set[str] = set()


def forget_inherited_engines() -> None:
    """In a process forked from one that used the database: the next session opens connections of its own.
    The parent's engines stay referenced, never disposed nor garbage-collected here: closing an inherited
    connection would end the parent's session on the same socket (SQLAlchemy, "Using Connection Pools with
    Multiprocessing")."""
    for url in list(_urls_seen):
        _INHERITED.append(engine_for(url))
    _urls_seen.clear()
    engine_for.cache_clear()
    _FACTORIES.clear()


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    _urls_seen.add(url)
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        eng = create_engine(url, connect_args={"check_same_thread": False, "timeout": LOCK_TIMEOUT_S})

        @event.listens_for(eng, "connect")
        def _pragmas(dbapi_conn, _):          # WAL: readers do not block the writer
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={int(LOCK_TIMEOUT_S * 1000)}")
            cur.close()
        return eng
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20,
                         connect_args={"connect_timeout": 5,
                                       "options": f"-c lock_timeout={int(LOCK_TIMEOUT_S * 1000)}"})


_FACTORIES: "weakref.WeakKeyDictionary[Engine, sessionmaker[Session]]" = weakref.WeakKeyDictionary()


def session_factory(url: str) -> sessionmaker[Session]:
    """Sessions on `engine_for(url)`'s engine, whichever it is now: a factory cached beside the engine cache
    would keep binding an engine that cache had dropped (two pools for one URL, and statements on an engine
    nobody else sees)."""
    eng = engine_for(url)
    factory = _FACTORIES.get(eng)
    if factory is None:
        factory = _FACTORIES[eng] = sessionmaker(bind=eng, expire_on_commit=False)
    return factory


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


def write_lock(s: Session, row_select=None):
    """Serialise this transaction with every other writer of the same state, before it reads that state.

    SQLite: the transaction becomes an immediate one (`BEGIN IMMEDIATE`: the database's write lock now, so
    what it reads next cannot change before it commits; already a writer when it wrote before). PostgreSQL:
    `row_select` (a select of the row that stands for the state, e.g. the fabric) runs `FOR UPDATE`.
    Returns that row (or None: no such row), read under the lock."""
    conn = s.connection()
    if conn.dialect.name == "sqlite":
        if not conn.connection.driver_connection.in_transaction:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        return None if row_select is None else s.scalar(row_select.execution_options(populate_existing=True))
    return None if row_select is None else s.scalar(row_select.with_for_update()
                                                    .execution_options(populate_existing=True))


def insert_new(s: Session, model, **values) -> bool:
    """INSERT the row unless one with its primary key exists (ON CONFLICT DO NOTHING: on PostgreSQL it waits
    for a concurrent insert of the same key to commit or roll back). True when this call inserted it."""
    dialect = postgresql if s.get_bind().dialect.name == "postgresql" else sqlite
    key = [c for c in model.__table__.primary_key.columns]
    stmt = dialect.insert(model.__table__).values(**values).on_conflict_do_nothing().returning(*key)
    return s.connection().execute(stmt).first() is not None


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
