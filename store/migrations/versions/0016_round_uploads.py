"""round_uploads: a round's accepted answers are stored before they are acknowledged, so that a coordinator taking
a job over mid-round closes the round with them (issue 27, point 3)

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 05:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'round_uploads',
        sa.Column('job_id', sa.String(64), sa.ForeignKey('jobs.id', ondelete='CASCADE'), primary_key=True),
        sa.Column('round', sa.Integer, primary_key=True),
        sa.Column('device', sa.String(64), primary_key=True),
        sa.Column('phase', sa.String(16), nullable=False),
        sa.Column('payload', sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table('round_uploads')
