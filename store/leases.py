"""Which worker runs a job: a renewable lease, so a redelivered or duplicated task never runs a job twice.

A worker claims a job before running it and renews the claim while it works. A task that finds the job
finished (or gone) is a duplicate and does nothing; one that finds a live claim held elsewhere waits; one
that finds an expired claim (its worker died) takes the job over and restarts it.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from domain.rules import MAX_ATTEMPTS
from store.base import utcnow
from store.jobs import TERMINAL, append_event, transition
from store.models import Job, JobState


class Outcome(enum.StrEnum):
    """What a claim attempt found."""

    CLAIMED = "claimed"  # the caller now runs the job
    FINISHED = "finished"  # the job is terminal or deleted: drop the task
    CANCELLED = "cancelled"  # cancellation was requested before the job started: now cancelled
    BUSY = "busy"  # another live worker holds the job: try again after `retry_after` seconds
    FAILED = "failed"  # the job's earlier attempts died and it may not run again (`restart_refused`): now failed


RESTART_MIN_SHARE = 0.1
"""A restarted attempt runs only while at least this share of the job's budget is left. Each attempt gets what
the earlier ones left (their device-seconds add up), so all of them together stay within the budget; with less
left, a restart would spend it on loading and compiling and deliver nothing worth having."""


def restart_refused(job: Job, max_attempts: int) -> str | None:
    """Why `job`, whose last attempt's worker died before the job ended, may not run again; None when it may."""
    if job.attempts >= max_attempts:
        return (f"its worker stopped {job.attempts} times before the job ended (killed, out of memory or past its "
                f"time limit); not retried after {max_attempts} attempts")
    if job.budget_seconds - job.device_seconds < RESTART_MIN_SHARE * job.budget_seconds:
        return (f"its {job.attempts} attempts spent {job.device_seconds:.0f} of its {job.budget_seconds:.0f} "
                f"device-seconds, and their workers stopped before the job ended; too little is left for another")
    return None


@dataclass(frozen=True)
class Claim:
    """The result of `claim`: the outcome, the attempt number when claimed, the wait when busy."""

    outcome: Outcome
    attempt: int = 0
    retry_after: float = 0.0


class LeaseLost(Exception):
    """The job's lease now belongs to another worker (or the job is gone): stop working on it."""


def _lock(session: Session, job_id: uuid.UUID) -> Job | None:
    return session.scalars(select(Job).where(Job.id == job_id).with_for_update()).first()


def claim(session: Session, job_id: uuid.UUID, owner: str, ttl_s: float,
          holder_dead: Callable[[str], bool] = lambda _owner: False, max_attempts: int = MAX_ATTEMPTS) -> Claim:
    """Try to take `job_id` for `owner` for `ttl_s` seconds; `holder_dead(owner)` may say a live-looking holder died.
    A job that was running when its worker died restarts unless `restart_refused`: then it fails, saying why."""
    job = _lock(session, job_id)
    if job is None or job.state in TERMINAL:
        return Claim(Outcome.FINISHED)
    now = utcnow()
    holder, expires = job.lease_owner, job.lease_expires_at
    if holder is not None and holder != owner and expires is not None and expires > now and not holder_dead(holder):
        return Claim(Outcome.BUSY, retry_after=(expires - now).total_seconds())
    if job.cancel_requested_at is not None:
        transition(job, JobState.CANCELLED)
        job.lease_owner = job.lease_expires_at = None
        append_event(session, job, "cancelled", {"before_start": job.started_at is None})
        return Claim(Outcome.CANCELLED)
    restarted = job.state is JobState.RUNNING
    if restarted and (why := restart_refused(job, max_attempts)) is not None:
        error = f"the job was not restarted: {why}"
        transition(job, JobState.FAILED, error=error)
        release(job)
        append_event(session, job, "failed", {"error": error})
        return Claim(Outcome.FAILED)
    if job.state is JobState.QUEUED:
        transition(job, JobState.RUNNING)
    job.attempts += 1
    job.lease_owner, job.lease_expires_at = owner, now + timedelta(seconds=ttl_s)
    job.progress, job.stage = 0.0, "starting"
    append_event(session, job, "attempt", {"attempt": job.attempts, "worker": owner, "restarted": restarted})
    return Claim(Outcome.CLAIMED, attempt=job.attempts)


def renew(session: Session, job_id: uuid.UUID, owner: str, ttl_s: float) -> Job:
    """Extend `owner`'s lease on a running job and return the job; raise LeaseLost when it is no longer ours."""
    job = _lock(session, job_id)
    if job is None or job.state is not JobState.RUNNING or job.lease_owner != owner:
        raise LeaseLost(f"job {job_id} is no longer leased to {owner}")
    job.lease_expires_at = utcnow() + timedelta(seconds=ttl_s)
    return job


def release(job: Job) -> None:
    """Clear a job's lease when it ends."""
    job.lease_owner = job.lease_expires_at = None


def hand_over(session: Session, job: Job, wait_s: float) -> bool:
    """Free an abandoned job for the next worker to claim at once; if none has within `wait_s`, it is abandoned
    again (so a lost redelivery is retried, but a redelivery waiting in the queue is not sent twice).

    `job` is the reaper's view of the row (`abandoned`): the hand-over is a compare-and-swap on the lease owner and
    expiry it read, so a worker that renewed its lease since (it was slow, not dead), a worker that claimed the job,
    or another reaper that handed it over first, keeps what it has. Returns whether the job was handed over; only
    then may the caller send it again."""
    seen_owner, seen_expires = job.lease_owner, job.lease_expires_at
    expires = utcnow() + timedelta(seconds=wait_s)
    owner_is = Job.lease_owner.is_(None) if seen_owner is None else Job.lease_owner == seen_owner
    expiry_is = Job.lease_expires_at.is_(None) if seen_expires is None else Job.lease_expires_at == seen_expires
    swapped = session.execute(update(Job).where(Job.id == job.id, Job.state == JobState.RUNNING, owner_is, expiry_is)
                              .values(lease_owner=None, lease_expires_at=expires).returning(Job.id)
                              .execution_options(synchronize_session=False)).first()
    if swapped is None:
        session.expire(job)  # what the row holds now is not what the reaper saw
        return False
    set_committed_value(job, "lease_owner", None)
    set_committed_value(job, "lease_expires_at", expires)
    append_event(session, job, "requeued", {"reason": "its worker stopped renewing the lease"})
    return True


def request_cancel(session: Session, job: Job) -> None:
    """Cancel a queued job now; ask a running one's worker to stop (it cancels within seconds). Idempotent."""
    if job.state in TERMINAL:
        return
    if job.state is JobState.QUEUED:
        transition(job, JobState.CANCELLED)
        append_event(session, job, "cancelled", {"before_start": True})
        return
    if job.cancel_requested_at is None:
        job.cancel_requested_at = utcnow()
        append_event(session, job, "cancel_requested", {})


def abandoned(session: Session, now: datetime | None = None) -> list[Job]:
    """Running jobs whose lease expired: their worker died and no task of theirs is alive."""
    now = now or utcnow()
    query = select(Job).where(Job.state == JobState.RUNNING, Job.lease_expires_at.is_not(None),
                              Job.lease_expires_at < now)
    return list(session.scalars(query))
