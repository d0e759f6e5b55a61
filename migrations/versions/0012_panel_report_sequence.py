"""panel reports: the agent's report sequence (a report is stored only when newer than the stored one)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 09:40:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('panel_states', schema=None) as batch_op:
        batch_op.add_column(sa.Column('report_sequence', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('panel_states', schema=None) as batch_op:
        batch_op.drop_column('report_sequence')
