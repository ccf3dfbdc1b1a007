"""suppressions: a retroactive rule is applied a batch a transaction after it is made (store.suppress
.apply_retroactive), with its state and cursor kept so that a restarted server finishes it (issue 24, point 2)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 03:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('suppressions') as t:
        t.add_column(sa.Column('retro_state', sa.String(16), nullable=False, server_default=''))
        t.add_column(sa.Column('retro_cursor', sa.String(100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('suppressions') as t:
        t.drop_column('retro_cursor')
        t.drop_column('retro_state')
