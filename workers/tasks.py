"""The workers' tasks, registered by name: `netsynth.synthesize(job_id)`, `netsynth.trial(trial_task_id)` (one
search trial of a job running on another worker), `netsynth.explain(explanation_id)` (one input explained with a
model); and the reaper of abandoned jobs and abandoned partial files."""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from typing import Any

from celery import Task, signals

from infra.broker import EXPLAIN, SYNTHESIZE, TRIAL, enqueue_synthesize
from infra.settings import Settings
from store.blobstores import make_blob_store
from store.db import make_engine, make_session_factory, session_scope
from store.leases import abandoned, hand_over
from workers.app import app
from workers.context import Context, worker_identity, worker_name
from workers.runner import Busy, run_job

log = logging.getLogger(__name__)


@functools.cache
def _context() -> Context:
    """This pool process's settings, database engine and blob store, made on first use (after the fork)."""
    settings = Settings()
    factory = make_session_factory(make_engine(settings.database_url))
    return Context(settings, factory, make_blob_store(settings), worker_identity())


def _uuid(text: str, task: str) -> uuid.UUID | None:
    """The id a task was sent, or None (logged: the message is dropped) when it is not one."""
    try:
        return uuid.UUID(text)
    except ValueError:
        log.error("%s: %r is not an id; dropped", task, text)
        return None


@app.task(name=SYNTHESIZE, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def synthesize(self: Task[Any, Any], job_id: str) -> str:
    """Run one job to its end; a copy of the task for a job another live worker holds retries later."""
    if (jid := _uuid(job_id, "synthesize")) is None:
        return "invalid-id"
    ctx = _context()
    try:
        return run_job(ctx, jid, worker_name(self.request.hostname))
    except Busy as busy:
        raise self.retry(countdown=min(max(busy.retry_after, 1.0), ctx.settings.lease_seconds)) from busy


@app.task(name=TRIAL, bind=True, acks_late=True, reject_on_worker_lost=True)
def trial(self: Task[Any, Any], trial_task_id: str) -> str:
    """Train one search trial for a job whose search runs on another worker; its outcome goes to the database."""
    from workers.subtask import run_trial_task

    if (row_id := _uuid(trial_task_id, "trial")) is None:
        return "invalid-id"
    return run_trial_task(_context(), row_id, worker_name(self.request.hostname))


@app.task(name=EXPLAIN, acks_late=True, reject_on_worker_lost=True)
def explain(explanation_id: str) -> str:
    """Answer one explanation request (`workers.explanations`); one answered already is left as it is."""
    from workers.explanations import run_explanation

    if (row_id := _uuid(explanation_id, "explain")) is None:
        return "invalid-id"
    return run_explanation(_context().factory, row_id)


def reap_once(settings: Settings) -> list[uuid.UUID]:
    """Send abandoned running jobs (their worker died; the broker will not redeliver) to the queue again."""
    engine = make_engine(settings.database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            jobs = abandoned(session)
            for job in jobs:
                hand_over(session, job, wait_s=max(settings.lease_seconds * 10, 600))
        for job in jobs:
            enqueue_synthesize(app, job)
            log.warning("job %s requeued: its worker stopped renewing the lease", job.id)
        return [job.id for job in jobs]
    finally:
        engine.dispose()


def sweep_once(settings: Settings) -> int:
    """Remove the partial files (and, on S3, the multipart uploads) abandoned in the blob store: a process killed
    mid-upload or mid-write left them."""
    removed = make_blob_store(settings).sweep()
    for path in removed:
        log.warning("removed the abandoned partial write %s", path)
    return len(removed)


_stop = threading.Event()


def _reap_forever(settings: Settings) -> None:
    while not _stop.wait(settings.lease_seconds / 2):
        try:
            reap_once(settings)
            sweep_once(settings)
        except Exception:
            log.exception("the reaper failed; trying again later")


@signals.worker_ready.connect
def _start_reaper(**_kwargs: Any) -> None:
    _stop.clear()
    threading.Thread(target=_reap_forever, args=(Settings(),), name="netsynth-reaper", daemon=True).start()


@signals.worker_shutdown.connect
def _stop_reaper(**_kwargs: Any) -> None:
    _stop.set()
