"""alerts indexed for the counts, charts and incidents: by time, by device and by incident, each index holding
the columns they add up (count, acknowledged, incident_id, device_id, score; the job for incidents), so that
counting over a month of alerts reads no row

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 12:00:00
"""
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_alerts_ts_tally', 'alerts', ['ts', 'device_id', 'incident_id', 'count', 'acknowledged',
                                                     'score'], unique=False)
    op.create_index('ix_alerts_device_ts_count', 'alerts', ['device_id', 'ts', 'count'], unique=False)
    op.create_index('ix_alerts_incident_tally', 'alerts', ['incident_id', 'device_id', 'ts', 'count', 'score',
                                                           'acknowledged', 'job_id'], unique=False)
    op.drop_index('ix_alerts_ts', table_name='alerts')
    op.drop_index('ix_alerts_device_ts', table_name='alerts')
    op.drop_index('ix_alerts_incident', table_name='alerts')


def downgrade() -> None:
    op.create_index('ix_alerts_incident', 'alerts', ['incident_id', 'ts'], unique=False)
    op.create_index('ix_alerts_device_ts', 'alerts', ['device_id', 'ts'], unique=False)
    op.create_index('ix_alerts_ts', 'alerts', ['ts'], unique=False)
    op.drop_index('ix_alerts_incident_tally', table_name='alerts')
    op.drop_index('ix_alerts_device_ts_count', table_name='alerts')
    op.drop_index('ix_alerts_ts_tally', table_name='alerts')
