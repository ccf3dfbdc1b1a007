"""server chunks (the rows of growing server arrays, stored per chunk); participants' counts apart

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 03:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('server_chunks',
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('array', sa.String(length=32), nullable=False),
    sa.Column('chunk', sa.Integer(), nullable=False),
    sa.Column('data', sa.LargeBinary(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'array', 'chunk')
    )
    with op.batch_alter_table('job_state', schema=None) as batch_op:
        batch_op.add_column(sa.Column('counts', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job_state', schema=None) as batch_op:
        batch_op.drop_column('counts')
    op.drop_table('server_chunks')
