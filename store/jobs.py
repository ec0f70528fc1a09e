"""The job state machine and the append-only job event log."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, select
from sqlalchemy.orm import Mapper, Session

import store.notify  # noqa: F401  (announces every new job event to the API's event streams)
from domain.errors import AppendOnly, InvalidTransition
from store.base import utcnow
from store.models import Job, JobEvent, JobState

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),  # failed: never sent
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}
TERMINAL: frozenset[JobState] = frozenset(s for s, targets in TRANSITIONS.items() if not targets)

def can_transition(current: JobState, new_state: JobState) -> bool:
    """Whether a job in `current` may move to `new_state`."""
    return new_state in TRANSITIONS[current]


def transition(job: Job, new_state: JobState, *, error: str | None = None) -> None:
    """Move `job` to `new_state`, stamping start/finish times; raise InvalidTransition on an illegal move."""
    current = JobState(job.state)
    if not can_transition(current, new_state):
        raise InvalidTransition(current.value, new_state.value)
    if error is not None and new_state is not JobState.FAILED:
        raise ValueError("an error message only goes with the failed state")
    job.state = new_state
    now = utcnow()
    if new_state is JobState.RUNNING:
        job.started_at = now
    if new_state in TERMINAL:
        job.finished_at = now
    if new_state is JobState.SUCCEEDED:
        job.progress = 1.0
    if new_state is JobState.FAILED:
        job.error = error


def append_event(session: Session, job: Job, kind: str, payload: dict[str, Any] | None = None) -> JobEvent:
    """Add an event to `job`'s log (flushed, so it has its sequence number) and return it."""
    entry = JobEvent(job_id=job.id, kind=kind, payload=dict(payload or {}), at=utcnow())
    session.add(entry)
    session.flush()
    return entry


def events_since(session: Session, job: Job, after_seq: int = 0) -> list[JobEvent]:
    """Return `job`'s events with a sequence number above `after_seq`, oldest first."""
    query = select(JobEvent).where(JobEvent.job_id == job.id, JobEvent.seq > after_seq).order_by(JobEvent.seq)
    return list(session.scalars(query))


@event.listens_for(JobEvent, "before_update")
def _refuse_update(_mapper: Mapper[JobEvent], _connection: Any, target: JobEvent) -> None:
    raise AppendOnly(f"job event {target.seq} cannot be updated")


@event.listens_for(JobEvent, "before_delete")
def _refuse_delete(_mapper: Mapper[JobEvent], _connection: Any, target: JobEvent) -> None:
    raise AppendOnly(f"job event {target.seq} cannot be deleted")
