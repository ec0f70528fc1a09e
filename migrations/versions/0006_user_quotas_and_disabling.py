"""users: disabled_at and per-user quota overrides

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0006'
down_revision: str | Sequence[str] | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('disabled_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('quota_active_jobs', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('quota_device_seconds', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('quota_storage_bytes', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('quota_storage_bytes')
        batch_op.drop_column('quota_device_seconds')
        batch_op.drop_column('quota_active_jobs')
        batch_op.drop_column('disabled_at')
