"""alerts carry their record's flow fields (Zeek uid, addresses, ports, proto, service; a CSV line number) and,
for incident updates, the incident; devices report the status of their model (loaded, scoring, refused and why)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 09:30:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('flow', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('incident', sa.JSON(), nullable=True))
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.add_column(sa.Column('model_status', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.drop_column('model_status')
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.drop_column('incident')
        batch_op.drop_column('flow')
