"""stage events: a plan event that closes a stage carries its start, end and duration (issue 25)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 10:35:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('plan_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('started_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('duration_s', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('plan_events', schema=None) as batch_op:
        batch_op.drop_column('duration_s')
        batch_op.drop_column('ended_at')
        batch_op.drop_column('started_at')
