"""alert forwarding: destinations with their cursor, and the deliveries behind it; alerts indexed by received

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 10:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('forward_destinations',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('label', sa.String(length=300), nullable=False),
    sa.Column('since', sa.DateTime(), nullable=False),
    sa.Column('cursor', sa.DateTime(), nullable=False),
    sa.Column('delivered', sa.Integer(), nullable=False),
    sa.Column('last_error', sa.String(length=300), nullable=True),
    sa.Column('updated', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('forward_deliveries',
    sa.Column('destination_id', sa.String(length=64), nullable=False),
    sa.Column('alert_id', sa.String(length=64), nullable=False),
    sa.Column('received', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['destination_id'], ['forward_destinations.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('destination_id', 'alert_id')
    )
    with op.batch_alter_table('forward_deliveries', schema=None) as batch_op:
        batch_op.create_index('ix_forward_deliveries_received', ['destination_id', 'received'], unique=False)
    op.create_index('ix_alerts_received', 'alerts', ['received'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_alerts_received', table_name='alerts')
    with op.batch_alter_table('forward_deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_forward_deliveries_received')
    op.drop_table('forward_deliveries')
    op.drop_table('forward_destinations')
