"""jobs.published_at: when the reaper last published a queued job's task again (the outbox of queued jobs)

Existing rows get NULL: a queued job is then due for a republish once it has waited the grace period since it was
created (`store.outbox`). SQLite adds and drops the column in place (3.35 and later), never by copying `jobs`, whose
rows other tables reference with ON DELETE CASCADE.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-08 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0010'
down_revision: str | Sequence[str] | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('published_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column('jobs', 'published_at')  # in place on SQLite too (3.35 and later): copying `jobs` would cascade
