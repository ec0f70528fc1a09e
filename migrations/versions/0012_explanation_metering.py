"""explanation requests metered like jobs: their bytes, device-seconds, attempts, heartbeat and republishes

`explanation_requests` gains what its owner's quotas count (`size_bytes`: the input, then the answer too;
`device_seconds`: what its attempts spent on a worker) and what runs and reaps its attempts (`attempts`, `worker`,
`started_at`, `beat_at`, `published_at`), `erased_at` (its owner deleted it: the content goes, the cost stays) and
an index on `state` (the reaper reads the queued and running ones). Existing rows get the bytes they hold, no
device-seconds (none were recorded) and no attempt. SQLite adds and drops the columns in place.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-09 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0012'
down_revision: str | Sequence[str] | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = 'explanation_requests'
INDEX = 'ix_explanation_requests_state'
_STAMPS = ('started_at', 'beat_at', 'published_at', 'erased_at')
# the bytes a row holds: the text (as UTF-8), the image, the attribution's JSON (none: SQL NULL or JSON null) and
# the overlay
_SIZE = {
    'postgresql': "coalesce(octet_length(text), 0) + coalesce(length(image), 0) + "
                  "CASE WHEN attribution IS NULL OR attribution::text = 'null' THEN 0 "
                  "ELSE octet_length(attribution::text) END + coalesce(length(overlay), 0)",
    'sqlite': "coalesce(length(CAST(text AS BLOB)), 0) + coalesce(length(image), 0) + "
              "CASE WHEN attribution IS NULL OR attribution = 'null' THEN 0 "
              "ELSE length(CAST(attribution AS BLOB)) END + coalesce(length(overlay), 0)",
}


def upgrade() -> None:
    op.add_column(TABLE, sa.Column('size_bytes', sa.BigInteger(), nullable=False, server_default='0'))
    op.add_column(TABLE, sa.Column('device_seconds', sa.Float(), nullable=False, server_default='0'))
    op.add_column(TABLE, sa.Column('attempts', sa.Integer(), nullable=False, server_default='0'))
    op.add_column(TABLE, sa.Column('worker', sa.String(length=255), nullable=True))
    for name in _STAMPS:
        op.add_column(TABLE, sa.Column(name, sa.DateTime(timezone=True), nullable=True))
    op.create_index(INDEX, TABLE, ['state'])
    size = _SIZE.get(op.get_bind().dialect.name)
    if size is not None:
        op.execute(f"UPDATE {TABLE} SET size_bytes = {size}")


def downgrade() -> None:
    op.drop_index(INDEX, table_name=TABLE)
    for name in ('erased_at', 'published_at', 'beat_at', 'started_at', 'worker', 'attempts', 'device_seconds',
                 'size_bytes'):
        op.drop_column(TABLE, name)
