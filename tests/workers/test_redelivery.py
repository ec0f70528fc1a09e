"""A killed worker's job is redelivered and finishes with exactly one model; cancellation stops a running job."""

from __future__ import annotations

import os
import signal
import uuid

import httpx
from sqlalchemy import select

from store.db import make_engine, make_session_factory
from store.jobs import TERMINAL
from store.models import Job, JobEvent, JobState, TrainedModel
from store.settings import Settings
from tests.workers.conftest import Digits, Keys, make_keys
from tests.workers.service import ApiServer, WorkerProcess, wait_for

V1 = "/api/v1"


class Db:
    """Read-only looks at a job's row, events and models."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        self.factory = make_session_factory(self.engine)

    def job(self, job_id: uuid.UUID) -> Job:
        with self.factory() as s:
            return s.get_one(Job, job_id)

    def kinds(self, job_id: uuid.UUID) -> list[str]:
        with self.factory() as s:
            return list(s.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.seq)))

    def models(self, job_id: uuid.UUID) -> list[str]:
        """The variants of the job's models, sorted."""
        with self.factory() as s:
            return sorted(s.scalars(select(TrainedModel.variant).where(TrainedModel.job_id == job_id)))

    def ended(self, job_id: uuid.UUID) -> Job | None:
        job = self.job(job_id)
        return job if job.state in TERMINAL else None


def _submit(settings: Settings, digits: Digits, keys: Keys, budget: int) -> uuid.UUID:
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        with digits.zip_path.open("rb") as f:
            dataset = client.post(f"{V1}/datasets", headers=keys.alice, files={"file": ("digits.zip", f)}).json()
        r = client.post(f"{V1}/jobs", headers=keys.alice, json={"dataset_id": dataset["id"], "budget": budget})
        assert r.status_code == 201, r.text
        return uuid.UUID(r.json()["id"])


def _start_training(settings: Settings, digits: Digits, keys: Keys, workers: list[WorkerProcess], log_name: str,
                    budget: int = 30) -> tuple[Db, WorkerProcess, uuid.UUID]:
    """Start a worker, submit a digits job and wait until its search has tried a candidate."""
    db = Db(settings.database_url)
    worker = WorkerProcess(settings, settings.blob_dir.parent / log_name).wait_ready()
    workers.append(worker)
    job_id = _submit(settings, digits, keys, budget)
    wait_for(lambda: "candidate" in db.kinds(job_id), 300, "the search to be under way")
    return db, worker, job_id


def test_sigkill_of_the_pool_process_redelivers_the_job(pg_redis_settings: Settings, digits: Digits,
                                                        worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    db, worker, job_id = _start_training(settings, digits, make_keys(settings.database_url), worker_factory,
                                         "worker.log")
    holder = db.job(job_id).lease_owner
    assert holder is not None
    os.kill(int(holder.split(":")[1]), signal.SIGKILL)  # the process running the job, mid-training

    job = wait_for(lambda: db.ended(job_id), 240, "the job to end")
    assert job.state is JobState.SUCCEEDED, (job.error, worker.log()[-3000:])
    assert job.attempts == 2 and job.lease_owner is None
    assert db.models(job_id) in (["dense"], ["compressed", "dense"])  # one per variant (compression may fail)
    kinds = db.kinds(job_id)
    assert kinds.count("attempt") == 2 and kinds.count("succeeded") == 1, kinds
    assert "WorkerLostError" in worker.log()  # Celery saw the pool process die and requeued its task
    db.engine.dispose()


def test_a_dead_worker_is_replaced_by_a_new_one(pg_redis_settings: Settings, digits: Digits,
                                                worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    db, first, job_id = _start_training(settings, digits, make_keys(settings.database_url), worker_factory,
                                        "first.log")
    first.kill_all()  # the whole worker, main process included: nothing is left to requeue the task

    second = WorkerProcess(settings, settings.blob_dir.parent / "second.log").wait_ready()
    worker_factory.append(second)
    job = wait_for(lambda: db.ended(job_id), 240, "the job to end")
    assert job.state is JobState.SUCCEEDED, (job.error, second.log()[-3000:])
    assert job.attempts == 2 and db.models(job_id) in (["dense"], ["compressed", "dense"])
    kinds = db.kinds(job_id)
    assert kinds.count("requeued") == 1 and kinds.count("attempt") == 2, kinds
    db.engine.dispose()


def test_cancel_stops_a_running_job_within_seconds_and_keeps_its_best_model(pg_redis_settings: Settings, digits: Digits,
                                                   worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    keys = make_keys(settings.database_url)
    db, _worker, job_id = _start_training(settings, digits, keys, worker_factory, "worker.log", budget=90)
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        r = client.post(f"{V1}/jobs/{job_id}/cancel", headers=keys.alice)
        assert r.status_code == 200 and r.json()["cancel_requested"], r.text
    job = wait_for(lambda: db.ended(job_id), 60, "the job to stop")
    assert job.state is JobState.CANCELLED
    assert db.models(job_id) == ["dense"]  # anytime: the best model trained before the cancellation is kept
    kinds = db.kinds(job_id)
    assert kinds.index("cancel_requested") < kinds.index("cancelled") and "succeeded" not in kinds, kinds
    db.engine.dispose()
