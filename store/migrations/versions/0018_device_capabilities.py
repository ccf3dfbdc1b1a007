"""devices.capabilities: what a device's status says it can do (job types, abilities, features), stored so that any
coordinator leading a job reads it, not only the process that heard the status (issue 27, point 2)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 12:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('devices') as batch:
        batch.add_column(sa.Column('capabilities', sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('devices') as batch:
        batch.drop_column('capabilities')
