"""one table per idea: explanation requests and search results leave reports; trial_tasks.report is its outcome

`reports` held four kinds of rows: a model's explainability report ('explainability'), a user's explanation
request ('explanation', its state and answer in JSON, its uploaded image and overlay in `report_images`), a job's
Pareto front ('pareto') and its search summary ('search'). Explanation requests move to `explanation_requests`
(same ids and timestamps; the JSON's fields as columns, the two images as bytes), a job's Pareto front and
search summary to one `search_results` row; `reports` keeps the explainability reports and loses `kind`.

SQLite: `reports.kind` is dropped and `trial_tasks.report` renamed in place (SQLite 3.35 and later), not by
copying the table: `report_images` references `reports` with ON DELETE CASCADE, and dropping the old copy of
`reports` would delete every report's files.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 10:00:00.000000
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op


revision: str = '0009'
down_revision: str | Sequence[str] | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EXPLAINABILITY = 'explainability'
MOVED = ('explanation', 'pareto', 'search')
INPUT, OVERLAY = 'input', 'overlay.png'
INPUT_TYPE, OVERLAY_TYPE = 'application/octet-stream', 'image/png'
STATES = ('queued', 'running', 'done', 'failed')

reports = sa.table(
    'reports', sa.column('id', sa.Uuid()), sa.column('created_at', sa.DateTime(timezone=True)),
    sa.column('job_id', sa.Uuid()), sa.column('model_id', sa.Uuid()), sa.column('kind', sa.String()),
    sa.column('content', sa.JSON()))
report_images = sa.table(
    'report_images', sa.column('report_id', sa.Uuid()), sa.column('name', sa.String()),
    sa.column('media_type', sa.String()), sa.column('data', sa.LargeBinary()))
explanations = sa.table(
    'explanation_requests', sa.column('id', sa.Uuid()), sa.column('created_at', sa.DateTime(timezone=True)),
    sa.column('job_id', sa.Uuid()), sa.column('model_id', sa.Uuid()), sa.column('state', sa.String()),
    sa.column('method', sa.String()), sa.column('input', sa.String()), sa.column('text', sa.Text()),
    sa.column('image', sa.LargeBinary()), sa.column('attribution', sa.JSON()), sa.column('overlay', sa.LargeBinary()),
    sa.column('reason', sa.String()), sa.column('error', sa.Text()))
searches = sa.table(
    'search_results', sa.column('id', sa.Uuid()), sa.column('created_at', sa.DateTime(timezone=True)),
    sa.column('job_id', sa.Uuid()), sa.column('summary', sa.JSON()), sa.column('pareto', sa.JSON()))
models = sa.table('models', sa.column('id', sa.Uuid()), sa.column('job_id', sa.Uuid()), sa.column('variant', sa.String()))


def upgrade() -> None:
    bind = op.get_bind()
    _refuse_unknown_kinds(bind)  # before anything changes: SQLite's DDL is not undone with the transaction
    op.create_table('explanation_requests',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('model_id', sa.Uuid(), nullable=False),
    sa.Column('state', sa.Enum(*STATES, name='explanationstate', native_enum=False, length=16), nullable=False),
    sa.Column('method', sa.String(length=64), nullable=False),
    sa.Column('input', sa.String(length=255), nullable=False),
    sa.Column('text', sa.Text(), nullable=True),
    sa.Column('image', sa.LargeBinary(), nullable=True),
    sa.Column('attribution', sa.JSON(), nullable=True),
    sa.Column('overlay', sa.LargeBinary(), nullable=True),
    sa.Column('reason', sa.String(length=64), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_explanation_requests_job_id_jobs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_explanation_requests_model_id_models'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_explanation_requests'))
    )
    op.create_index(op.f('ix_explanation_requests_job_id'), 'explanation_requests', ['job_id'], unique=False)
    op.create_index(op.f('ix_explanation_requests_model_id'), 'explanation_requests', ['model_id'], unique=False)
    op.create_table('search_results',
    sa.Column('job_id', sa.Uuid(), nullable=False),
    sa.Column('summary', sa.JSON(), nullable=False),
    sa.Column('pareto', sa.JSON(), nullable=False),
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_search_results_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_search_results'))
    )
    op.create_index(op.f('ix_search_results_job_id'), 'search_results', ['job_id'], unique=True)
    _move_explanations_out(bind)
    _move_searches_out(bind)
    moved = sa.select(reports.c.id).where(reports.c.kind.in_(MOVED))
    bind.execute(report_images.delete().where(report_images.c.report_id.in_(moved)))
    bind.execute(reports.delete().where(reports.c.kind.in_(MOVED)))
    op.drop_column('reports', 'kind')
    op.alter_column('trial_tasks', 'report', new_column_name='outcome')


def downgrade() -> None:
    op.alter_column('trial_tasks', 'outcome', new_column_name='report')
    op.add_column('reports', sa.Column('kind', sa.String(length=64), nullable=False, server_default=EXPLAINABILITY))
    bind = op.get_bind()
    if bind.dialect.name != 'sqlite':  # SQLite cannot drop a default in place (see the module's note)
        op.alter_column('reports', 'kind', server_default=None)
    _move_explanations_back(bind)
    _move_searches_back(bind)
    op.drop_index(op.f('ix_search_results_job_id'), table_name='search_results')
    op.drop_table('search_results')
    op.drop_index(op.f('ix_explanation_requests_model_id'), table_name='explanation_requests')
    op.drop_index(op.f('ix_explanation_requests_job_id'), table_name='explanation_requests')
    op.drop_table('explanation_requests')


def _refuse_unknown_kinds(bind: sa.Connection) -> None:
    """Stop before a report row of a kind netsynth never wrote would lose its kind (and pass for a model's report)."""
    unknown = sorted(set(bind.scalars(sa.select(reports.c.kind).where(reports.c.kind.notin_((EXPLAINABILITY, *MOVED))))))
    if unknown:
        raise RuntimeError(f"reports holds rows of kinds {unknown}: move or delete them before this migration")


def _images(bind: sa.Connection, report_id: uuid.UUID) -> dict[str, bytes]:
    rows = bind.execute(sa.select(report_images.c.name, report_images.c.data)
                        .where(report_images.c.report_id == report_id))
    return {name: bytes(data) for name, data in rows}


def _move_explanations_out(bind: sa.Connection) -> None:
    for row in bind.execute(sa.select(reports).where(reports.c.kind == 'explanation')).mappings().all():
        content: dict[str, Any] = row['content']
        images = _images(bind, row['id'])
        bind.execute(explanations.insert().values(
            id=row['id'], created_at=row['created_at'], job_id=row['job_id'], model_id=row['model_id'],
            state=content['state'], method=content['method'], input=content['input'], text=content.get('text'),
            image=images.get(INPUT), attribution=content.get('attribution'),
            overlay=images.get(OVERLAY), reason=content.get('reason'),
            error=content.get('error')))


def _move_searches_out(bind: sa.Connection) -> None:
    found: dict[uuid.UUID, dict[str, Any]] = {}
    query = sa.select(reports).where(reports.c.kind.in_(('pareto', 'search'))).order_by(reports.c.created_at)
    for row in bind.execute(query).mappings().all():  # one of each kind per job: the worker writes both at once
        doc = found.setdefault(row['job_id'], {'id': row['id'], 'created_at': row['created_at'], 'summary': {},
                                                'pareto': []})
        if row['kind'] == 'pareto':
            doc['pareto'] = row['content'].get('points', [])
        else:
            doc['summary'] = row['content']
    for job_id, doc in found.items():
        bind.execute(searches.insert().values(job_id=job_id, **doc))


def _move_explanations_back(bind: sa.Connection) -> None:
    for row in bind.execute(sa.select(explanations)).mappings().all():
        content = {'state': row['state'], 'method': row['method'], 'input': row['input']}
        content.update({k: row[k] for k in ('text', 'attribution', 'reason', 'error') if row[k] is not None})
        if row['overlay'] is not None:
            content['overlay'] = OVERLAY
        bind.execute(reports.insert().values(id=row['id'], created_at=row['created_at'], job_id=row['job_id'],
                                             model_id=row['model_id'], kind='explanation', content=content))
        for name, media_type, data in ((INPUT, INPUT_TYPE, row['image']), (OVERLAY, OVERLAY_TYPE, row['overlay'])):
            if data is not None:
                bind.execute(report_images.insert().values(report_id=row['id'], name=name, media_type=media_type,
                                                           data=data))


def _move_searches_back(bind: sa.Connection) -> None:
    for row in bind.execute(sa.select(searches)).mappings().all():
        dense = bind.scalar(sa.select(models.c.id).where(models.c.job_id == row['job_id'], models.c.variant == 'dense'))
        for kind, content in (('pareto', {'points': row['pareto']}), ('search', row['summary'])):
            bind.execute(reports.insert().values(id=row['id'] if kind == 'pareto' else uuid.uuid4(),
                                                 created_at=row['created_at'], job_id=row['job_id'], model_id=dense,
                                                 kind=kind, content=content))
