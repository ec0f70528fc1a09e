"""Run one job: claim it, train on its dataset within its budget, save its models once, finish the job.

Idempotent: a redelivered task for a finished job does nothing; one for a job whose worker died restarts it
(its attempt number grows) with what is left of its budget, until `Settings.max_attempts`; the model is saved in
the same transaction that marks the job succeeded.
"""

from __future__ import annotations

import logging
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from billiard.pool import SIG_SOFT_TIMEOUT
from celery.exceptions import SoftTimeLimitExceeded

from store.db import session_scope
from store.jobs import TERMINAL, append_event, transition
from store.leases import Claim, LeaseLost, Outcome, claim, release, renew
from store.metering import coordinator_seconds, meter_coordinator
from store.models import Dataset, Job, JobState
from synthesis.progress import Cancelled, Ending, OutOfTime
from workers.context import Context, holder_dead, worker_name
from workers.monitor import JobMonitor, LeaseTaken

if TYPE_CHECKING:
    from synthesis.interface import Synthesis
    from workers.data import Prepared

log = logging.getLogger(__name__)


class Busy(Exception):
    """Another live worker holds the job; retry after `retry_after` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"the job is held by another worker; retry in {retry_after:.0f} s")
        self.retry_after = retry_after


def run_job(ctx: Context, job_id: uuid.UUID, worker: str = "") -> str:
    """Run `job_id` to a terminal state and return what happened; raise Busy when another worker holds it.
    `worker` names this process in the search log (default: host and process id)."""
    with session_scope(ctx.factory) as session:
        got: Claim = claim(session, job_id, ctx.owner, ctx.settings.lease_seconds, holder_dead,
                           ctx.settings.max_attempts)
    if got.outcome is Outcome.BUSY:
        raise Busy(got.retry_after)
    if got.outcome is not Outcome.CLAIMED:
        return got.outcome.value
    with session_scope(ctx.factory) as session:
        spent_before = coordinator_seconds(session.get_one(Job, job_id))
    monitor = JobMonitor(ctx.factory, job_id, ctx.owner, ctx.settings.lease_seconds, spent_before=spent_before)
    with monitor, soft_time_limit_as_deadline(monitor):
        return _run(ctx, job_id, monitor, got.attempt, worker or worker_name(None))


@contextmanager
def soft_time_limit_as_deadline(monitor: JobMonitor) -> Iterator[None]:
    """While a job runs, Celery's soft time limit only tells `monitor`, which ends the synthesis at its next call
    as its deadline would (the best model so far is delivered). Celery's own handler of the signal that billiard
    sends a pool process raises `SoftTimeLimitExceeded` wherever the code is, where it was taken for a failed trial or
    a failed compression. Signal handlers belong to the main thread: elsewhere this changes nothing."""
    if SIG_SOFT_TIMEOUT is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(SIG_SOFT_TIMEOUT, lambda _signum, _frame: monitor.time_up())
    try:
        yield
    finally:
        signal.signal(SIG_SOFT_TIMEOUT, previous)


def _run(ctx: Context, job_id: uuid.UUID, monitor: JobMonitor, attempt: int, worker: str) -> str:
    from synthesis.budget import Budget  # JAX loads with the engine, in the pool process only
    from synthesis.engine import synthesize
    from synthesis.interface import Options
    from synthesis.space import Constraints
    from workers.app import app
    from workers.data import prepare
    from workers.executor import CeleryExecutor

    try:
        with session_scope(ctx.factory) as session:
            job = session.get_one(Job, job_id)
            if job.dataset_id is None:
                raise RuntimeError("the job's dataset was deleted before the job ran")
            dataset = session.get_one(Dataset, job.dataset_id)
            # what earlier attempts (with their trials on other workers) and this one's start (importing the engine)
            # left of the budget; claim saw to it that a restart has a tenth of it
            left = max(job.budget_seconds - monitor.elapsed() - job.trial_seconds, 1.0)
            budget = Budget(epochs=job.budget_epochs) if job.budget_epochs is not None else Budget(seconds=left)
            limits, seed, queue, tolerance = dict(job.constraints), job.seed, job.queue, job.tolerance
        monitor.stage("loading")
        prepared = prepare(dataset, ctx.blobs, ctx.settings.ingest_limits(), seed)
        constraints = Constraints(max_params=limits.get("max_params"), max_model_bytes=limits.get("max_model_bytes"),
                                  max_latency_ms=limits.get("max_latency_ms"))
        executor = CeleryExecutor(ctx, app, job_id, attempt, queue, worker)  # other idle workers train trials too
        try:
            options = Options(seed=seed, constraints=constraints, executor=executor, tolerance=tolerance)
            result = synthesize(prepared.task, budget, options, monitor)
        finally:
            executor.discard_weights()
        return _succeed(ctx, job_id, result, prepared, monitor.elapsed(), job_state(result.ending, delivered=True))
    except OutOfTime:
        return _end(ctx, job_id, job_state(Ending.DEADLINE, delivered=False), monitor.elapsed(),
                    error="the job reached its task's time limit before any candidate finished training")
    except Cancelled:  # the user's, before anything trained: synthesis had nothing to deliver
        return _end(ctx, job_id, job_state(Ending.CANCELLED, delivered=False), monitor.elapsed(),
                    note="cancelled before any candidate finished training: no model")
    except SoftTimeLimitExceeded:  # where `soft_time_limit_as_deadline` could not take the signal (not the main thread)
        return _end(ctx, job_id, job_state(Ending.FAILED, delivered=False), monitor.elapsed(),
                    error="the job ran past its budget's time limit and was stopped")
    except LeaseTaken:
        log.warning("job %s: another worker took it over; stopping", job_id)
        return "lease-lost"
    except Exception as exc:
        log.exception("job %s failed", job_id)
        return _end(ctx, job_id, job_state(Ending.FAILED, delivered=False), monitor.elapsed(),
                    error=f"{type(exc).__name__}: {exc}")


def job_state(ending: Ending, *, delivered: bool) -> JobState:
    """The state a job ends in, from how its synthesis ended and whether it delivered a model: a deadline with a
    model is a success (the best model so far ships), without one a failure; a cancellation is a cancellation
    either way."""
    if ending is Ending.CANCELLED:
        return JobState.CANCELLED
    if ending is Ending.FAILED or not delivered:
        return JobState.FAILED
    return JobState.SUCCEEDED


def _succeed(ctx: Context, job_id: uuid.UUID, result: Synthesis, prepared: Prepared, spent: float,
             end: JobState = JobState.SUCCEEDED) -> str:
    """Save the synthesis and end the job (succeeded, or cancelled with the best model it had)."""
    from workers import results

    try:
        with session_scope(ctx.factory) as session:
            job = renew(session, job_id, ctx.owner, ctx.settings.lease_seconds)
            model_id = results.save(session, job_id, result, prepared)
            meter_coordinator(session, job_id, spent)
            job.stage = "done"
            transition(job, end)
            release(job)
            if result.ending is Ending.DEADLINE:
                append_event(session, job, "time_limit", {"note": "the task's soft time limit came before the "
                                                          "synthesis ended; the best model trained so far was saved"})
            payload = {"model_id": str(model_id), "metrics": _scalars(result.model.metrics)}
            if result.compressed is not None:
                payload["compressed"] = _scalars(result.compressed.model.metrics)
            append_event(session, job, end.value, payload)
    except LeaseLost:
        return "lease-lost"
    return end.value


def _scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, int | float | str)}


def _end(ctx: Context, job_id: uuid.UUID, state: JobState, spent: float, error: str | None = None,
         note: str | None = None) -> str:
    """End the job without a model: failed with `error`, or cancelled (`note` says what the user gets)."""
    with session_scope(ctx.factory) as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None or job.state in TERMINAL or job.lease_owner != ctx.owner:
            return "lease-lost"
        meter_coordinator(session, job_id, spent)
        transition(job, state, error=error)
        release(job)
        append_event(session, job, state.value, {"error": error} if error else {"note": note} if note else {})
    return state.value
