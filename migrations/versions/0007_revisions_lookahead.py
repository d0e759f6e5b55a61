"""plan revisions (failure reports, repairs), port faults, look-ahead planes (1x2 switch state)

Revision ID: 0007
Revises: 0004
Create Date: 2026-12-01 09:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('plan_revisions',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('plan_id', sa.String(length=32), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('stage', sa.String(length=32), nullable=False),
    sa.Column('progress', sa.Float(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('cause', sa.JSON(), nullable=False),
    sa.Column('failed', sa.JSON(), nullable=False),
    sa.Column('repair', sa.Boolean(), nullable=False),
    sa.Column('result', sa.JSON(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('plan_id', 'number', name='uq_plan_revision_number')
    )
    with op.batch_alter_table('plan_revisions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_plan_revisions_plan_id'), ['plan_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_plan_revisions_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_plan_revisions_dispatched_at'), ['dispatched_at'], unique=False)

    op.create_table('repairs',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('plan_id', sa.String(length=32), nullable=False),
    sa.Column('revision_number', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('panels', sa.JSON(), nullable=False),
    sa.Column('moves', sa.JSON(), nullable=False),
    sa.Column('ready_estimate_s', sa.Float(), nullable=False),
    sa.Column('restored_number', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('applied_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('repairs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_repairs_plan_id'), ['plan_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_repairs_status'), ['status'], unique=False)

    op.create_table('port_faults',
    sa.Column('panel_id', sa.String(length=100), nullable=False),
    sa.Column('side', sa.String(length=8), nullable=False),
    sa.Column('port', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('reported_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['panel_id'], ['panels.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('panel_id', 'side', 'port')
    )

    op.create_table('host_planes',
    sa.Column('fabric_id', sa.String(length=100), nullable=False),
    sa.Column('host_id', sa.String(length=100), nullable=False),
    sa.Column('active_side', sa.Integer(), nullable=False),
    sa.Column('lookahead_plan_id', sa.String(length=32), nullable=True),
    sa.ForeignKeyConstraint(['fabric_id'], ['fabrics.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['lookahead_plan_id'], ['plans.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('fabric_id', 'host_id')
    )
    with op.batch_alter_table('host_planes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_host_planes_lookahead_plan_id'), ['lookahead_plan_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('host_planes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_host_planes_lookahead_plan_id'))
    op.drop_table('host_planes')
    op.drop_table('port_faults')
    with op.batch_alter_table('repairs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_repairs_status'))
        batch_op.drop_index(batch_op.f('ix_repairs_plan_id'))
    op.drop_table('repairs')
    with op.batch_alter_table('plan_revisions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_plan_revisions_dispatched_at'))
        batch_op.drop_index(batch_op.f('ix_plan_revisions_status'))
        batch_op.drop_index(batch_op.f('ix_plan_revisions_plan_id'))
    op.drop_table('plan_revisions')
