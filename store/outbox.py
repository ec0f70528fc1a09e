"""The outbox of queued jobs: a job whose task was never published is published again, once per grace period.

The API commits a job `queued`, then publishes its task. A job committed but never published (the API killed
between the two, or a publish error it did not catch) would stay queued forever, holding a place of its owner's
active-job quota. The workers' reaper therefore publishes again every job still queued (no worker has taken it:
`store.leases.claim` makes a taken job `running`) `after_s` seconds after it was last published, or created when no
republish happened yet (`jobs.published_at`).

Many reapers run at once (one in every worker), so each republish is claimed first with a compare-and-swap on
`published_at`: `UPDATE jobs SET published_at = :now WHERE id = :id AND state = 'queued' AND published_at = :seen`
(`IS NULL` for a job never republished). Of reapers that read the same `published_at`, exactly one updates the row,
on PostgreSQL (a concurrent UPDATE waits for the row lock, then checks its WHERE again against the committed row)
as on SQLite (one writer at a time); the others find it changed and leave the job alone. The winner commits the
claim, then publishes; a publish that fails gives the claim back (`release_publish`), so the next pass tries again.
A copy too many is harmless: a worker runs a job once (`store.leases.claim`), and a copy that finds it done drops.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.orm import Session

from store.models import Job, JobState


@dataclass(frozen=True)
class Unpublished:
    """A queued job due for a republish, and the `published_at` its reader saw (the claim's expected value)."""

    id: uuid.UUID
    created_at: datetime
    published_at: datetime | None

    @property
    def sent_at(self) -> datetime:
        """When its task was last published: by the reaper, or else by the API when it created the job."""
        return self.published_at or self.created_at


@dataclass(frozen=True)
class Publish:
    """A republish claimed by this reaper: what sending the job's task reads of it (`infra.broker.QueuedJob`)."""

    id: uuid.UUID
    queue: str
    budget_seconds: float
    published_at: datetime
    seen: datetime | None  # the `published_at` before the claim, restored when the publish fails


def due(session: Session, now: datetime, after_s: float, limit: int = 100) -> list[Unpublished]:
    """Queued jobs last published (or, never republished, created) more than `after_s` seconds before `now`,
    oldest first."""
    since = now - timedelta(seconds=after_s)
    stale = or_(and_(Job.published_at.is_(None), Job.created_at < since), Job.published_at < since)
    rows = session.execute(select(Job.id, Job.created_at, Job.published_at).where(Job.state == JobState.QUEUED, stale)
                           .order_by(Job.created_at).limit(limit))
    return [Unpublished(job_id, created, published) for job_id, created, published in rows]


def _seen(value: datetime | None) -> ColumnElement[bool]:
    return Job.published_at.is_(None) if value is None else Job.published_at == value


def claim_publish(session: Session, job: Unpublished, now: datetime) -> Publish | None:
    """Claim the republish of `job` for this reaper at `now`: None when another reaper claimed it since `job` was
    read, or a worker took the job (it is no longer queued). Commit before publishing."""
    claimed = session.execute(update(Job).where(Job.id == job.id, Job.state == JobState.QUEUED,
                                                _seen(job.published_at))
                              .values(published_at=now).returning(Job.queue, Job.budget_seconds)
                              .execution_options(synchronize_session=False)).first()
    if claimed is None:
        return None
    return Publish(job.id, claimed.queue, claimed.budget_seconds, now, job.published_at)


def release_publish(session: Session, publish: Publish) -> bool:
    """Give back a claimed republish whose publish failed (the next reaper pass tries again); False when the row
    changed since (nothing to give back)."""
    given = session.execute(update(Job).where(Job.id == publish.id, Job.published_at == publish.published_at)
                            .values(published_at=publish.seen).returning(Job.id)
                            .execution_options(synchronize_session=False)).first()
    return given is not None
