"""jobs.phase, job_state.phase, rounds.phase, round_uploads.phase: 64 characters. A private job's phases name the
secure sum and its step (`threshold:advertise`, 19 characters): on PostgreSQL, which enforces the length (SQLite
does not), such a job failed at the first phase name longer than 16.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 15:15:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None

TABLES = ('jobs', 'job_state', 'rounds', 'round_uploads')


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column('phase', type_=sa.String(64), existing_type=sa.String(16), existing_nullable=False)


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column('phase', type_=sa.String(16), existing_type=sa.String(64), existing_nullable=False)
