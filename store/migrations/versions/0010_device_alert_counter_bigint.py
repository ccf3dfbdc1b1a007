"""devices.alerts as a 64-bit counter: it adds up the flagged records a device's alerts stand for (an incident
update counts all of its own, up to 2^31 - 1 each), and PostgreSQL's 32-bit integer overflowed on one such alert,
failing its batch (ingestion then stored the batch row by row: 9,097 -> 466 alerts/s)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 18:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('devices') as batch:
        batch.alter_column('alerts', existing_type=sa.Integer(), type_=sa.BigInteger(), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table('devices') as batch:
        batch.alter_column('alerts', existing_type=sa.BigInteger(), type_=sa.Integer(), existing_nullable=False)
