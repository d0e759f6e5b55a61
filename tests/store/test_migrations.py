"""Alembic is the only schema path: upgrading an empty database gives exactly the models' schema."""
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from services.store.db import alembic_config, migrate
from services.store.models import Base

from tests.conftest import BACKENDS, database_url


@pytest.mark.parametrize("backend", BACKENDS)
def test_upgrade_matches_models_and_downgrade_drops(backend, tmp_path):
    from alembic import command

    url = database_url(backend, tmp_path, "mig")
    migrate(url)
    eng = create_engine(url)
    with eng.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == [], diff
    tables = set(inspect(eng).get_table_names())
    assert {"plans", "plan_events", "frontiers", "artifacts", "plan_artifacts", "api_keys"} <= tables
    command.downgrade(alembic_config(url), "base")
    assert set(inspect(eng).get_table_names()) <= {"alembic_version"}
    migrate(url)                                       # and back up again
    assert "plans" in inspect(eng).get_table_names()
    eng.dispose()
