"""liveness by the worker: a `workers` table of worker processes and their heartbeats; each job names the
worker that holds it (`holder`, NULL while its next task waits in the queue) and counts the workers it lost
(`losses`), apart from its delivery attempts

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28 20:45:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

JOB_TABLES = ('plans', 'evaluations', 'compile_jobs', 'plan_revisions')


def upgrade() -> None:
    op.create_table('workers',
                    sa.Column('id', sa.String(length=64), nullable=False),
                    sa.Column('kind', sa.String(length=16), nullable=False),
                    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
                    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=False),
                    sa.PrimaryKeyConstraint('id'))
    op.create_index('ix_workers_heartbeat_at', 'workers', ['heartbeat_at'])
    for table in JOB_TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('holder', sa.String(length=64), nullable=True))
            batch_op.add_column(sa.Column('losses', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    for table in JOB_TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('losses')
            batch_op.drop_column('holder')
    op.drop_index('ix_workers_heartbeat_at', table_name='workers')
    op.drop_table('workers')
