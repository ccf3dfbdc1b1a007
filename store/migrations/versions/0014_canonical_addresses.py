"""flagged_records: addresses in their canonical text (IPv6 compressed, lower case; store.records.canonical_address),
so that a search by address finds a flow however either side wrote it (issue 24, point 7). Only IPv6 texts can
differ from their canonical form (an IPv4 address has one text Python accepts), so only rows holding ':' are read.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 03:00:00
"""
import sqlalchemy as sa
from alembic import op

from store.records import canonical_address

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None

BATCH = 5000


def upgrade() -> None:
    bind = op.get_bind()
    records = sa.table('flagged_records', sa.column('id', sa.String), sa.column('orig_h', sa.String),
                       sa.column('resp_h', sa.String))
    for column in ('orig_h', 'resp_h'):
        col = records.c[column]
        after = ''
        while True:
            rows = bind.execute(sa.select(records.c.id, col).where(col.contains(':'), records.c.id > after)
                                .order_by(records.c.id).limit(BATCH)).all()
            if not rows:
                break
            changed = [{'rid': rid, 'v': canonical_address(v)} for rid, v in rows if canonical_address(v) != v]
            if changed:
                bind.execute(sa.update(records).where(records.c.id == sa.bindparam('rid'))
                             .values({column: sa.bindparam('v')}), changed)
            after = rows[-1][0]


def downgrade() -> None:
    pass  # the canonical text is an address's text too
