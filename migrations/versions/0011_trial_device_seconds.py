"""device-seconds of search trials: trial_tasks.device_seconds, and jobs.trial_seconds (included in device_seconds)

A job's device-seconds were its coordinator's wall-clock seconds only; the trials other workers ran for it were not
counted. Now each trial sub-task records its seconds on its row and adds them to its job's `trial_seconds` and
`device_seconds` (`store.metering`). Existing jobs get 0 trial seconds (what they recorded), existing trials NULL.
SQLite adds and drops the columns in place (3.35 and later), never by copying `jobs`, whose rows other tables
reference with ON DELETE CASCADE.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-08 11:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0011'
down_revision: str | Sequence[str] | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('trial_seconds', sa.Float(), nullable=False, server_default='0'))
    op.add_column('trial_tasks', sa.Column('device_seconds', sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column('trial_tasks', 'device_seconds')
    op.drop_column('jobs', 'trial_seconds')
