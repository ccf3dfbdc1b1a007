"""PostgreSQL: alert_skews, the ids of alerts stored at their receipt because their device's clock ran ahead
(store.alerts), with the time they were stored at: their redeliveries carry another time, which the key (id, ts) of
partitioned alerts (store.partitions, opt-in) would not skip. Kept in both shapes, so that converting later knows
every such alert stored before. `alerts` itself stays one table keyed by id. SQLite: unchanged (one table, its
insert skips a redelivery by id).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 16:20:00
"""
from alembic import op

from store.partitions import partitioned

revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE TABLE alert_skews (id varchar(64) PRIMARY KEY, ts timestamp NOT NULL)")
    op.execute("CREATE INDEX ix_alert_skews_ts ON alert_skews (ts)")


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    if partitioned(conn):  # the inserts before 0020 name the key `id` alone
        raise RuntimeError("alerts are partitioned by day: make them one table first (fedsentry db partition-alerts "
                           "--undo) before downgrading below 0020")
    op.execute("DROP TABLE alert_skews")
