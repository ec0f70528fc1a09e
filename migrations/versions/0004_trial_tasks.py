"""search trials sent to other workers as sub-tasks

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0004'
down_revision: str | Sequence[str] | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('trial_tasks',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('trial_index', sa.Integer(), nullable=False),
    sa.Column('request', sa.JSON(), nullable=False),
    sa.Column('state', sa.Enum('queued', 'running', 'done', 'cancelled', name='trialstate', native_enum=False, length=16), nullable=False),
    sa.Column('worker', sa.String(length=200), nullable=True),
    sa.Column('report', sa.JSON(), nullable=True),
    sa.Column('weights_key', sa.String(length=512), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_trial_tasks_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_trial_tasks')),
    sa.UniqueConstraint('job_id', 'attempt', 'trial_index', name='uq_trial_tasks_job_attempt_index')
    )
    op.create_index(op.f('ix_trial_tasks_job_id'), 'trial_tasks', ['job_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_trial_tasks_job_id'), table_name='trial_tasks')
    op.drop_table('trial_tasks')
