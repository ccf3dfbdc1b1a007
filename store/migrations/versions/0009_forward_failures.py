"""alert forwarding: deliveries marked failed (refused by the destination, or stuck while later alerts were
delivered) and each destination's count of them

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 19:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('forward_destinations', sa.Column('failed', sa.Integer(), server_default='0', nullable=False))
    op.add_column('forward_deliveries', sa.Column('failed', sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    # plain DROP COLUMN (SQLite 3.35+): batch mode would copy forward_destinations into a new table, and
    # dropping the old one would delete every delivery (ON DELETE CASCADE)
    op.execute('ALTER TABLE forward_deliveries DROP COLUMN failed')
    op.execute('ALTER TABLE forward_destinations DROP COLUMN failed')
