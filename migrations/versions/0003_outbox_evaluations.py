"""outbox (plans.dispatched_at), evaluations run by workers, the version a panel report names

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 09:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.add_column(sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f('ix_plans_dispatched_at'), ['dispatched_at'], unique=False)
    # plans accepted before the outbox were handed to a worker at once
    op.execute("UPDATE plans SET dispatched_at = updated_at")

    op.create_table('evaluations',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('request', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('stage', sa.String(length=32), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('result', sa.JSON(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_evaluations_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_evaluations_dispatched_at'), ['dispatched_at'], unique=False)

    with op.batch_alter_table('panel_states', schema=None) as batch_op:
        batch_op.add_column(sa.Column('reported_version', sa.Integer(), nullable=False, server_default='0'))
    op.execute("UPDATE panel_states SET reported_version = applied_version")


def downgrade() -> None:
    with op.batch_alter_table('panel_states', schema=None) as batch_op:
        batch_op.drop_column('reported_version')
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_evaluations_dispatched_at'))
        batch_op.drop_index(batch_op.f('ix_evaluations_status'))
    op.drop_table('evaluations')
    with op.batch_alter_table('plans', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_plans_dispatched_at'))
        batch_op.drop_column('dispatched_at')
