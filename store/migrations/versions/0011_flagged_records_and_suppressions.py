"""flagged_records: every flagged record past a device's alert budget, kept whole with its flow and explanation
(issue 24: the budget limits notifications and forwarding, never storage); suppressions, the analysts' rules, and
suppressed_alerts, the alerts they hold back (stored whole, out of the listings and forwarding)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 21:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'flagged_records',
        sa.Column('id', sa.String(80), primary_key=True),
        sa.Column('alert_id', sa.String(64), nullable=False),
        sa.Column('device_id', sa.String(64), nullable=False),
        sa.Column('incident_id', sa.String(24), nullable=True),
        sa.Column('ts', sa.DateTime(), nullable=False),
        sa.Column('score', sa.Float(), nullable=False),
        sa.Column('threshold', sa.Float(), nullable=False),
        sa.Column('explanation', sa.JSON(), nullable=False),
        sa.Column('flow', sa.JSON(), nullable=True),
        sa.Column('uid', sa.String(64), nullable=True),
        sa.Column('orig_h', sa.String(64), nullable=True),
        sa.Column('resp_h', sa.String(64), nullable=True),
        sa.Column('suppression_id', sa.String(32), nullable=True),
    )
    op.create_index('ix_flagged_incident_ts', 'flagged_records', ['incident_id', 'ts', 'id'])
    op.create_index('ix_flagged_device_ts', 'flagged_records', ['device_id', 'ts', 'id'])
    op.create_index('ix_flagged_ts', 'flagged_records', ['ts', 'id'])
    op.create_index('ix_flagged_uid', 'flagged_records', ['uid'])
    op.create_index('ix_flagged_orig_h', 'flagged_records', ['orig_h'])
    op.create_index('ix_flagged_resp_h', 'flagged_records', ['resp_h'])
    op.create_table(
        'suppressions',
        sa.Column('id', sa.String(32), primary_key=True),
        sa.Column('reason', sa.String(500), nullable=False),
        sa.Column('created', sa.DateTime(), nullable=False),
        sa.Column('created_by', sa.String(64), nullable=False),
        sa.Column('expires', sa.DateTime(), nullable=True),
        sa.Column('removed', sa.DateTime(), nullable=True),
        sa.Column('removed_by', sa.String(64), nullable=True),
        sa.Column('match', sa.JSON(), nullable=False),
        sa.Column('retroactive', sa.BigInteger(), nullable=False),
        sa.Column('held', sa.BigInteger(), nullable=False),
    )
    op.create_table(
        'suppressed_alerts',
        sa.Column('id', sa.String(64), primary_key=True),
        sa.Column('device_id', sa.String(64), nullable=False),
        sa.Column('job_id', sa.String(64), nullable=False),
        sa.Column('model_version', sa.Integer(), nullable=False),
        sa.Column('ts', sa.DateTime(), nullable=False),
        sa.Column('received', sa.DateTime(), nullable=False),
        sa.Column('score', sa.Float(), nullable=False),
        sa.Column('threshold', sa.Float(), nullable=False),
        sa.Column('count', sa.Integer(), nullable=False),
        sa.Column('explanation', sa.JSON(), nullable=False),
        sa.Column('flow', sa.JSON(), nullable=True),
        sa.Column('incident', sa.JSON(), nullable=True),
        sa.Column('acknowledged', sa.Boolean(), nullable=False),
        sa.Column('acknowledged_at', sa.DateTime(), nullable=True),
        sa.Column('acknowledged_by', sa.String(64), nullable=True),
        sa.Column('ack_note', sa.String(500), nullable=True),
        sa.Column('incident_id', sa.String(24), nullable=True),
        sa.Column('suppression_id', sa.String(32), nullable=False),
        sa.Column('suppressed_at', sa.DateTime(), nullable=False),
    )
    op.create_index('ix_suppressed_rule_ts', 'suppressed_alerts', ['suppression_id', 'ts', 'id'])


def downgrade() -> None:
    op.drop_table('suppressed_alerts')
    op.drop_table('suppressions')
    op.drop_table('flagged_records')
