"""A job committed but never published (the API stopped between its commit and its publish) is published again by
the reaper after the grace period, once per grace period however many reapers run at once, and runs once: real
PostgreSQL, Redis and a Celery worker process."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta

import redis
from celery import Celery

from infra.broker import celery_config
from infra.settings import Settings
from store.db import make_engine, make_session_factory, session_scope
from store.jobs import TERMINAL
from store.models import BudgetTier, Dataset, Job, JobState, Modality, User
from tests.workers.jobs import Db
from tests.workers.service import WorkerProcess, wait_for
from workers.tasks import republish_once


def _committed_never_sent(settings: Settings) -> tuple[uuid.UUID, datetime]:
    """A queued job as the API commits it, whose task nobody published (its dataset's file is missing: a worker
    that takes the job fails it at once, without training)."""
    engine = make_engine(settings.database_url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            user = User(email="dora@example.org")
            s.add(user)
            s.flush()
            dataset = Dataset(owner_id=user.id, name="d", modality=Modality.IMAGE, checksum="0" * 64,
                              blob_key="datasets/missing")
            s.add(dataset)
            s.flush()
            job = Job(owner_id=user.id, dataset_id=dataset.id, budget_tier=BudgetTier.CUSTOM, budget_seconds=30,
                      state=JobState.QUEUED, queue=settings.default_queue)
            s.add(job)
            s.flush()
            return job.id, job.created_at
    finally:
        engine.dispose()


def _concurrently(settings: Settings, sender: Celery, now: datetime, reapers: int = 6) -> list[uuid.UUID]:
    """Run `reapers` reaper steps at once (each its own engine, as each worker's reaper has); what they sent."""
    barrier, sent = threading.Barrier(reapers), list[uuid.UUID]()

    def step() -> None:
        barrier.wait()
        sent.extend(republish_once(settings, now, sender))

    threads = [threading.Thread(target=step) for _ in range(reapers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sent


def test_a_job_never_published_is_republished_once_per_grace_period_and_runs_once(
        pg_redis_settings: Settings, redis_url: str, worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings.model_copy(update={"republish_after_s": 60.0})
    queue, broker = settings.default_queue, redis.Redis.from_url(redis_url)
    sender = Celery("test-reaper", config_source=celery_config(settings), set_as_current=False)
    job_id, created = _committed_never_sent(settings)
    grace = timedelta(seconds=settings.republish_after_s)

    assert republish_once(settings, created + grace / 2, sender) == []  # within the grace period: left alone
    assert broker.llen(queue) == 0
    first = created + grace + timedelta(seconds=1)
    assert republish_once(settings, first, sender) == [job_id]
    assert broker.llen(queue) == 1  # its task is on the queue now
    assert republish_once(settings, first, sender) == []  # the reaper's next pass, or another's: not again
    assert _concurrently(settings, sender, first + grace / 2) == []
    assert broker.llen(queue) == 1
    # still queued a grace period later (no worker serves the queue yet): sent once more, by one of the reapers
    assert _concurrently(settings, sender, first + grace + timedelta(seconds=1)) == [job_id]
    assert broker.llen(queue) == 2
    db = Db(settings.database_url)
    assert db.job(job_id).state is JobState.QUEUED and db.kinds(job_id) == ["requeued", "requeued"]

    worker = WorkerProcess(settings, settings.blob_dir.parent / "worker.log").wait_ready()
    worker_factory.append(worker)
    job = wait_for(lambda: db.ended(job_id), 120, "the worker to take the job and end it")
    wait_for(lambda: broker.llen(queue) == 0, 60, "the worker to take the second copy")
    wait_for(lambda: worker.log().count("succeeded in") >= 2, 60, "the second copy to drop")
    job = db.job(job_id)
    assert job.state is JobState.FAILED and job.state in TERMINAL, worker.log()[-3000:]
    assert job.attempts == 1 and db.kinds(job_id).count("attempt") == 1  # two copies, one run
    assert republish_once(settings, first + 10 * grace, sender) == []  # no longer queued: never sent again
    db.engine.dispose()
