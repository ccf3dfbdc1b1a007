"""triage: who acknowledged an alert and why (acknowledged_by, ack_note), alerts grouped by incident
(incident_id, filled in for the incident updates already stored), API keys with a name

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 10:00:00
"""
import sqlalchemy as sa
from alembic import op

from store.alerts import incident_id

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.add_column(sa.Column('acknowledged_by', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('ack_note', sa.String(length=500), nullable=True))
        batch_op.add_column(sa.Column('incident_id', sa.String(length=24), nullable=True))
        batch_op.create_index('ix_alerts_incident', ['incident_id', 'ts'], unique=False)
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.add_column(sa.Column('name', sa.String(length=64), nullable=True))
    alerts = sa.table('alerts', sa.column('id', sa.String), sa.column('device_id', sa.String),
                      sa.column('incident', sa.JSON), sa.column('incident_id', sa.String))
    conn = op.get_bind()
    rows = conn.execute(sa.select(alerts.c.id, alerts.c.device_id, alerts.c.incident)
                        .where(sa.cast(alerts.c.incident, sa.Text).like('{%'))).all()
    updates = [{"row_id": i, "incident_id": incident_id(d, inc)} for i, d, inc in rows]
    updates = [u for u in updates if u["incident_id"]]
    if updates:
        conn.execute(alerts.update().where(alerts.c.id == sa.bindparam("row_id"))
                     .values(incident_id=sa.bindparam("incident_id")), updates)


def downgrade() -> None:
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_column('name')
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.drop_index('ix_alerts_incident')
        batch_op.drop_column('incident_id')
        batch_op.drop_column('ack_note')
        batch_op.drop_column('acknowledged_by')
