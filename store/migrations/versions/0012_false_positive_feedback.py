"""feedback: analysts' false-positive actions on alerts, flagged records and incidents (issue 24, point 3), the
scores they send to the device and the effect it reports

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 00:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'feedback',
        sa.Column('id', sa.String(32), primary_key=True),
        sa.Column('device_id', sa.String(64), nullable=False),
        sa.Column('target', sa.String(16), nullable=False),
        sa.Column('target_id', sa.String(80), nullable=False),
        sa.Column('reason', sa.String(500), nullable=False),
        sa.Column('created', sa.DateTime(), nullable=False),
        sa.Column('created_by', sa.String(64), nullable=False),
        sa.Column('removed', sa.DateTime(), nullable=True),
        sa.Column('removed_by', sa.String(64), nullable=True),
        sa.Column('records', sa.Integer(), nullable=False),
        sa.Column('entries', sa.JSON(), nullable=False),
        sa.Column('published', sa.Boolean(), nullable=False),
        sa.Column('effect', sa.JSON(), nullable=True),
    )
    op.create_index('ix_feedback_device', 'feedback', ['device_id', 'created'])
    op.create_index('ix_feedback_target', 'feedback', ['target', 'target_id'])


def downgrade() -> None:
    op.drop_table('feedback')
