"""Persistence: SQLAlchemy 2 models, engine/session factory, repositories. Schema changes only via Alembic."""
