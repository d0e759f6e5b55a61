"""the API key that queued each job (plans, evaluations, compile jobs, revisions): per-key job bounds

Revision ID: 0010
Revises: 0007
Create Date: 2026-11-26 09:45:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0007'
branch_labels = None
depends_on = None

TABLES = ('plans', 'evaluations', 'compile_jobs', 'plan_revisions')


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('owner', sa.String(length=64), nullable=True))
            batch_op.create_index(batch_op.f(f'ix_{table}_owner'), ['owner'], unique=False)


def downgrade() -> None:
    for table in reversed(TABLES):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(batch_op.f(f'ix_{table}_owner'))
            batch_op.drop_column('owner')
