"""The workers' tasks, registered by name: `netsynth.synthesize(job_id)`, `netsynth.trial(trial_task_id)` (one
search trial of a job running on another worker), `netsynth.explain(explanation_id)` (one input explained with a
model); and the reaper of abandoned jobs, of queued jobs whose task was never published, of stranded or unsent
explanation requests (`workers.explain_reaper`), and of abandoned partial files."""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from datetime import datetime
from typing import Any

from celery import Celery, Task, signals

from infra.broker import EXPLAIN, SYNTHESIZE, TRIAL, enqueue_synthesize, time_limits
from infra.settings import Settings
from store.base import utcnow
from store.blobstores import make_blob_store
from store.db import make_engine, make_session_factory, session_scope
from store.jobs import append_event
from store.leases import abandoned, hand_over
from store.models import Job
from store.outbox import Publish, claim_publish, due, release_publish
from workers.app import app
from workers.context import Context, worker_identity, worker_name
from workers.explain_reaper import reap_explanations_once
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
def synthesize(self: Task[Any, Any], job_id: str, republished: bool = False) -> str:
    """Run one job to its end; a copy of the task for a job another live worker holds retries later, except a copy
    the reaper published again (`republish_once`), which drops: the job it was sent for has been taken, and should
    its holder die, the reaper sends the job again (`reap_once`)."""
    if (jid := _uuid(job_id, "synthesize")) is None:
        return "invalid-id"
    ctx = _context()
    try:
        return run_job(ctx, jid, worker_name(self.request.hostname))
    except Busy as busy:
        if republished:
            return "busy"
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
    """Answer one explanation request (`workers.explanations`); one answered already is left as it is, one another
    live worker answers is dropped, and one whose workers died `Settings.explain_max_attempts` times fails."""
    from workers.explanations import run_explanation

    if (row_id := _uuid(explanation_id, "explain")) is None:
        return "invalid-id"
    ctx = _context()
    return run_explanation(ctx.factory, row_id, owner=ctx.owner, lease_s=ctx.settings.lease_seconds,
                           max_attempts=ctx.settings.explain_max_attempts)


def reap_once(settings: Settings) -> list[uuid.UUID]:
    """Send abandoned running jobs (their worker died; the broker will not redeliver) to the queue again."""
    engine = make_engine(settings.database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            # only the jobs whose lease is still as the reaper read it: a worker that renewed since keeps its job
            jobs = [job for job in abandoned(session)
                    if hand_over(session, job, wait_s=max(settings.lease_seconds * 10, 600))]
        for job in jobs:
            enqueue_synthesize(app, job)
            log.warning("job %s requeued: its worker stopped renewing the lease", job.id)
        return [job.id for job in jobs]
    finally:
        engine.dispose()


def republish_once(settings: Settings, now: datetime | None = None, sender: Celery | None = None) -> list[uuid.UUID]:
    """Publish again (with `sender`, default the workers' app) the task of each job still queued
    `settings.republish_after_s` seconds after it was last sent (`store.outbox`): once per grace period, by whichever
    reaper claims it first."""
    now = now or utcnow()
    engine = make_engine(settings.database_url)
    sent: list[uuid.UUID] = []
    try:
        factory = make_session_factory(engine)
        with factory() as session:
            waiting = due(session, now, settings.republish_after_s)
        for job in waiting:
            waited = (now - job.sent_at).total_seconds()
            with session_scope(factory) as session:
                claimed = claim_publish(session, job, now)
                if claimed is not None:
                    append_event(session, session.get_one(Job, job.id), "requeued", {
                        "reason": f"no worker had taken it {waited:.0f} s after it was sent; sent again"})
            if claimed is None:  # another reaper republished it, or a worker took it, since it was read
                continue
            try:
                _publish_again(sender or app, claimed)
            except Exception:
                log.warning("job %s: publishing its task again failed; trying again later", job.id, exc_info=True)
                with session_scope(factory) as session:
                    release_publish(session, claimed)
                continue
            log.warning("job %s: still queued %.0f s after it was sent; its task was published again", job.id, waited)
            sent.append(job.id)
        return sent
    finally:
        engine.dispose()


def _publish_again(sender: Celery, job: Publish) -> None:
    """Send `synthesize(job.id, republished=True)` as the API sends a new job's task (`enqueue_synthesize`)."""
    soft, hard = time_limits(job.budget_seconds)
    limits: dict[str, Any] = {"soft_time_limit": soft, "time_limit": hard}
    sender.send_task(SYNTHESIZE, args=[str(job.id)], kwargs={"republished": True}, queue=job.queue, **limits)


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
            republish_once(settings)
            reap_explanations_once(settings, app)
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
