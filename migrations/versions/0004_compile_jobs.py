"""compile jobs: a plan's schedules compiled per runtime and options (done, failed, or in progress)

Revision ID: 0004
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('compile_jobs',
    sa.Column('plan_id', sa.String(length=32), nullable=False),
    sa.Column('collective', sa.String(length=32), nullable=False),
    sa.Column('options', sa.String(length=300), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('digest', sa.String(length=64), nullable=True),
    sa.Column('meta', sa.JSON(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['digest'], ['artifacts.digest'], ),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('plan_id', 'collective', 'options')
    )


def downgrade() -> None:
    op.drop_table('compile_jobs')
