"""change feed: changes committed on SQLite, read by the other processes of the same deployment (`serve
--workers N`), whose caches and waiters they concern (PostgreSQL has LISTEN/NOTIFY instead)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28 21:30:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('changes',
                    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
                    sa.Column('channel', sa.String(length=32), nullable=False),
                    sa.Column('key', sa.String(length=200), nullable=False),
                    sa.Column('origin', sa.String(length=64), nullable=False),
                    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
                    sa.PrimaryKeyConstraint('id'))
    op.create_index('ix_changes_at', 'changes', ['at'])


def downgrade() -> None:
    op.drop_index('ix_changes_at', table_name='changes')
    op.drop_table('changes')
