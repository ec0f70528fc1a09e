"""The remote side of a parallel search trial: `netsynth.trial(row id)` trains one candidate for a job that runs
on another worker, on the job's dataset loaded here, and writes its outcome to the row (weights to the blob store).

Idempotent: only a queued row runs (a redelivered message for a running, finished or cancelled row does
nothing), and an outcome lands only while the row is still running, so a trial its search gave up on is dropped.

Metered: the seconds this process spends on the trial, from taking it to storing its outcome (loading the data,
compiling and training included), are added to the row's and its job's device-seconds (`store.metering`) as they
pass, every `METER_EVERY_S` while it trains and at its end, so the job's quota sees them even when the trial runs
past its job or its process is killed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from infra.logs import log_context
from store.base import utcnow
from store.db import session_scope
from store.metering import charge_trial
from store.models import Dataset, Job, JobState, TrialState, TrialTask
from workers.context import Context

if TYPE_CHECKING:
    from core.data import Dataset as Arrays
    from synthesis.executor import TrialOutcome

log = logging.getLogger(__name__)
_cache: dict[tuple[uuid.UUID, int], Arrays] = {}

METER_EVERY_S = 10.0
"""How often a training trial adds the seconds it has spent so far to its job's device-seconds."""


class TrialMeter:
    """The seconds this process has spent on one trial since it took it, and how many of them are charged."""

    def __init__(self, job_id: uuid.UUID, row_id: uuid.UUID, started: float | None = None) -> None:
        self.job_id, self.row_id = job_id, row_id
        self.charged_until = time.monotonic() if started is None else started  # `time.monotonic()` seconds

    def due(self, every_s: float = METER_EVERY_S) -> bool:
        """Whether `every_s` seconds have passed uncharged."""
        return time.monotonic() - self.charged_until >= every_s

    def charge(self, session: Session) -> float:
        """Add the seconds not yet charged to the trial and its job in `session`; pass what it returns to
        `charged` once the session has committed."""
        until = time.monotonic()
        charge_trial(session, self.job_id, self.row_id, until - self.charged_until)
        return until

    def charged(self, until: float) -> None:
        """The charge up to `until` (from `charge`) is committed."""
        self.charged_until = max(self.charged_until, until)

    def settle(self, ctx: Context) -> None:
        """Charge what is left in a transaction of its own (best effort: the database may be what failed)."""
        try:
            with session_scope(ctx.factory) as session:
                until = self.charge(session)
            self.charged(until)
        except Exception:
            log.warning("trial task %s: its last %.1f s could not be charged to job %s", self.row_id,
                        time.monotonic() - self.charged_until, self.job_id, exc_info=True)


def _claim(ctx: Context, row_id: uuid.UUID, worker: str) -> tuple[TrialTask, Job] | None:
    with session_scope(ctx.factory) as session:
        row = session.scalars(select(TrialTask).where(TrialTask.id == row_id).with_for_update()).first()
        if row is None or row.state is not TrialState.QUEUED:
            return None
        job = session.get_one(Job, row.job_id)
        if job.state is not JobState.RUNNING or job.dataset_id is None:
            row.state = TrialState.CANCELLED
            return None
        row.state, row.worker, row.started_at = TrialState.RUNNING, worker, utcnow()
        session.flush()
        session.expunge_all()
        return row, job


def training_data(ctx: Context, job: Job) -> Arrays:
    """The training and validation rows the job's search trains on (the engine's split of the job's dataset,
    and its sample for the search)."""
    from synthesis.engine import search_data, split_task
    from synthesis.interface import Options
    from workers.data import prepare

    assert job.dataset_id is not None
    cache_key = (job.dataset_id, job.seed)
    if cache_key not in _cache:
        with session_scope(ctx.factory) as session:
            dataset = session.get_one(Dataset, job.dataset_id)
            session.expunge(dataset)
        task = prepare(dataset, ctx.blobs, ctx.settings.ingest_limits(), job.seed).task
        _cache.clear()  # one dataset at a time per process
        _cache[cache_key] = search_data(split_task(task, job.seed, Options().test_fraction)[2], job.seed)
    return _cache[cache_key]


def _watch(ctx: Context, row_id: uuid.UUID, meter: TrialMeter, every_s: float = 1.0) -> Callable[[], bool]:
    """Whether the row is still running (its search still wants the trial), read at most every `every_s`; the
    seconds spent so far are charged with it every `METER_EVERY_S`."""
    seen = {"at": -float("inf"), "wanted": True}

    def still_wanted() -> bool:
        if time.monotonic() - seen["at"] >= every_s:
            seen["at"] = time.monotonic()
            until = None
            with session_scope(ctx.factory) as session:
                seen["wanted"] = session.get_one(TrialTask, row_id).state is TrialState.RUNNING
                if meter.due():
                    until = meter.charge(session)
            if until is not None:
                meter.charged(until)
        return bool(seen["wanted"])
    return still_wanted


def run_trial_task(ctx: Context, row_id: uuid.UUID, worker: str) -> str:
    """Train the trial of row `row_id` on this worker and store its outcome; return what happened. The lines logged
    while it trains and stores carry the `job_id` of the job the trial belongs to."""
    started = time.monotonic()
    claimed = _claim(ctx, row_id, worker)  # before JAX loads: the coordinator sees at once that a worker took it
    if claimed is None:
        return "skipped"
    row, job = claimed
    meter = TrialMeter(job.id, row_id, started)  # from taking the trial: loading JAX is part of its cost
    from synthesis.executor import TrialOutcome, TrialRequest, run_request
    from synthesis.trial import TrialResult

    request = TrialRequest.from_dict(row.request)
    with log_context(job_id=str(job.id)):
        stored = False
        try:
            try:
                outcome = run_request(request, training_data(ctx, job), worker, _watch(ctx, row_id, meter))
            except Exception as exc:  # a failed trial never fails the job
                log.exception("trial %s of job %s failed", request.index, job.id)
                outcome = TrialOutcome(request.index, TrialResult(status="failed",
                                                                  reason=f"{type(exc).__name__}: {exc}"[:500]), worker)
            status = _store(ctx, row_id, job.id, request.spec, outcome, meter)
            stored = True
            return status
        finally:
            if not stored:  # `_store` raised before it charged the rest
                meter.settle(ctx)


def _store(ctx: Context, row_id: uuid.UUID, job_id: uuid.UUID, spec: dict[str, object], outcome: TrialOutcome,
           meter: TrialMeter) -> str:
    """Store the trial's outcome (unless its search gave up on it) and charge the seconds it took, in one
    transaction."""
    from core import checkpoint
    from core.spec import Spec
    from workers.executor import save_weights

    key = None
    if outcome.result.variables is not None:
        key = save_weights(ctx, job_id, row_id, checkpoint.to_bytes(Spec.from_dict(spec), outcome.result.variables))
    with session_scope(ctx.factory) as session:
        row = session.scalars(select(TrialTask).where(TrialTask.id == row_id).with_for_update()).first()
        until = meter.charge(session)  # kept or dropped, the trial took this process's time
        if row is None or row.state is not TrialState.RUNNING:  # its search gave up on it meanwhile
            if key is not None:
                ctx.blobs.delete(key)
            status = "dropped"
        else:
            row.state, row.outcome, row.weights_key = TrialState.DONE, outcome.to_dict(), key
            row.finished_at, status = utcnow(), outcome.result.status
    meter.charged(until)
    return status
