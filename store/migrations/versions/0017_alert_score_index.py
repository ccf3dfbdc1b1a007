"""alerts indexed by score, holding the columns the counts and charts add up, so that a count under a minimum score
reads the alerts at or above it instead of every alert of the window; the incident index holds incident updates
only (nothing reads single alerts through it), so that an alert stored still writes as many index entries

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 12:30:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None

#: what a count or a chart reads of an alert besides its score (PostgreSQL: INCLUDE; SQLite: trailing columns)
HELD = ['ts', 'device_id', 'incident_id', 'count', 'acknowledged', 'job_id']
INCIDENT = ['incident_id', 'device_id', 'ts', 'count', 'score', 'acknowledged', 'job_id']


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.create_index('ix_alerts_score_tally', 'alerts', ['score'] + ([] if postgresql else HELD),
                    postgresql_include=HELD)
    op.drop_index('ix_alerts_incident_tally', table_name='alerts')
    op.create_index('ix_alerts_incident_tally', 'alerts', INCIDENT, postgresql_where=sa.text("incident_id IS NOT NULL"),
                    sqlite_where=sa.text("incident_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_index('ix_alerts_incident_tally', table_name='alerts')
    op.create_index('ix_alerts_incident_tally', 'alerts', INCIDENT)
    op.drop_index('ix_alerts_score_tally', table_name='alerts')
