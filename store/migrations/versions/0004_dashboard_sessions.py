"""dashboard sessions kept on the server (hashed tokens), so signing out and revoking a key end them

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 05:45:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('dashboard_sessions',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('key_id', sa.String(length=32), nullable=False),
    sa.Column('created', sa.DateTime(), nullable=False),
    sa.Column('expires', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['key_id'], ['api_keys.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('dashboard_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dashboard_sessions_key_id'), ['key_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('dashboard_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dashboard_sessions_key_id'))
    op.drop_table('dashboard_sessions')
