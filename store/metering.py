"""Device-seconds: what a job costs, summed over every worker process that worked on it.

A job's `device_seconds` is its coordinator's seconds (the wall-clock seconds of the worker process that runs the job,
its attempts added) plus `trial_seconds`: the wall-clock seconds of the worker processes that ran its search trials
as sub-tasks (`workers.subtask`), each of which held a device for that long. The quotas (`store.quotas`) and the
metrics read `device_seconds`, so they see the whole cost, not the coordinator's alone.

Neither side reads the sum before writing it, so neither loses the other's seconds: a trial adds its seconds to
both columns in one UPDATE (`charge_trial`), and the coordinator sets `device_seconds` to its own seconds plus
whatever `trial_seconds` holds when its UPDATE runs (`meter_coordinator`). Each UPDATE evaluates its right-hand side
against the row it updates (on PostgreSQL after waiting for the row's lock, on SQLite with the one write lock).
"""

from __future__ import annotations

import uuid

from sqlalchemy import func, update
from sqlalchemy.orm import Session

from store.models import Job, TrialTask


def coordinator_seconds(job: Job) -> float:
    """The seconds the job's own attempts spent (its device-seconds less those of its trials on other workers)."""
    return max(job.device_seconds - job.trial_seconds, 0.0)


def meter_coordinator(session: Session, job_id: uuid.UUID, seconds: float) -> None:
    """Record that the job's attempts have spent `seconds` in all: its device-seconds become that plus its trials'."""
    session.execute(update(Job).where(Job.id == job_id)
                    .values(device_seconds=Job.trial_seconds + round(max(seconds, 0.0), 3)))


def charge_trial(session: Session, job_id: uuid.UUID, trial_id: uuid.UUID, seconds: float) -> None:
    """Add `seconds` that a worker process spent on trial `trial_id` to the trial's and its job's device-seconds."""
    seconds = round(max(seconds, 0.0), 3)
    session.execute(update(TrialTask).where(TrialTask.id == trial_id)
                    .values(device_seconds=func.coalesce(TrialTask.device_seconds, 0.0) + seconds))
    session.execute(update(Job).where(Job.id == job_id)
                    .values(trial_seconds=Job.trial_seconds + seconds, device_seconds=Job.device_seconds + seconds))
