"""compile jobs: a plan's schedules compiled per runtime and options (done, failed, or in progress), outbox
jobs like plans and evaluations

Revision ID: 0004
Revises: 0003
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('compile_jobs',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('plan_id', sa.String(length=32), nullable=False),
    sa.Column('collective', sa.String(length=32), nullable=False),
    sa.Column('options', sa.String(length=300), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('stage', sa.String(length=32), nullable=False),
    sa.Column('digest', sa.String(length=64), nullable=True),
    sa.Column('meta', sa.JSON(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('dispatched_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['digest'], ['artifacts.digest'], ),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('plan_id', 'collective', 'options', name='uq_compile_job')
    )
    op.create_index('ix_compile_jobs_plan_id', 'compile_jobs', ['plan_id'])
    op.create_index('ix_compile_jobs_status', 'compile_jobs', ['status'])
    op.create_index('ix_compile_jobs_dispatched_at', 'compile_jobs', ['dispatched_at'])


def downgrade() -> None:
    op.drop_table('compile_jobs')
