"""A job's lifecycle under faults, with real PostgreSQL, Redis and Celery worker processes: a killed worker's job is
redelivered and finishes with exactly one model, and one whose workers keep dying fails after its last attempt; a
second copy of a running job's task waits and drops; cancellation and the soft time limit stop a running job within
seconds and keep its best model."""

from __future__ import annotations

import functools
import os
import re
import signal
import uuid

import httpx
from billiard.pool import SIG_SOFT_TIMEOUT
from celery import Celery

from infra.broker import celery_config, enqueue_synthesize
from infra.settings import Settings
from store.models import JobState
from tests.workers.conftest import Digits, Keys, make_keys
from tests.workers.jobs import V1, Db, submit
from tests.workers.service import ApiServer, WorkerProcess, wait_for


def _start_training(settings: Settings, digits: Digits, keys: Keys, workers: list[WorkerProcess], log_name: str,
                    budget: int = 30, trained: int = 1) -> tuple[Db, WorkerProcess, uuid.UUID]:
    """Start a worker, submit a digits job and wait until its search has trained `trained` candidates (0: until it
    has proposed its first one)."""
    db = Db(settings.database_url)
    worker = WorkerProcess(settings, settings.blob_dir.parent / log_name).wait_ready()
    workers.append(worker)
    job_id = submit(settings, digits, keys, budget)

    def under_way() -> bool:
        candidates = db.events(job_id, "candidate")
        return len(candidates) >= 1 and sum(bool(c["curve"]) for c in candidates) >= trained

    wait_for(under_way, 300, "the search to be under way")
    return db, worker, job_id


def _attempts_reach(db: Db, job_id: uuid.UUID, attempt: int) -> bool:
    return db.job(job_id).attempts >= attempt


def _pool_pid(db: Db, job_id: uuid.UUID) -> int:
    """The process id of the pool process that holds the job's lease."""
    holder = db.job(job_id).lease_owner
    assert holder is not None
    return int(holder.split(":")[1])


def test_sigkill_of_the_pool_process_redelivers_the_job(pg_redis_settings: Settings, digits: Digits,
                                                        worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    db, worker, job_id = _start_training(settings, digits, make_keys(settings.database_url), worker_factory,
                                         "worker.log")
    os.kill(_pool_pid(db, job_id), signal.SIGKILL)  # the process running the job, mid-training

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


def test_a_cancel_before_any_candidate_trained_ends_cancelled_and_says_so(pg_redis_settings: Settings,
                                                                        digits: Digits,
                                                                        worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    keys = make_keys(settings.database_url)
    db = Db(settings.database_url)
    worker = WorkerProcess(settings, settings.blob_dir.parent / "worker.log").wait_ready()
    worker_factory.append(worker)
    job_id = submit(settings, digits, keys, 120)
    wait_for(lambda: db.job(job_id).stage == "search", 300, "the search stage")
    pool = _pool_pid(db, job_id)
    os.kill(pool, signal.SIGSTOP)  # calibrating latencies (seconds): no candidate can finish before the cancel lands
    try:
        with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
            r = client.post(f"{V1}/jobs/{job_id}/cancel", headers=keys.alice)
            assert r.status_code == 200, r.text
    finally:
        os.kill(pool, signal.SIGCONT)
    job = wait_for(lambda: db.ended(job_id), 120, "the job to stop")
    assert job.state is JobState.CANCELLED, (job.error, worker.log()[-3000:])
    assert db.models(job_id) == [] and not any(c["curve"] for c in db.events(job_id, "candidate"))
    assert db.events(job_id, "cancelled") == [{"note": "cancelled before any candidate finished training: no model"}]
    db.engine.dispose()


def test_the_soft_time_limit_ends_a_job_as_its_deadline_does(pg_redis_settings: Settings, digits: Digits,
                                                             worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    db, worker, job_id = _start_training(settings, digits, make_keys(settings.database_url), worker_factory,
                                         "worker.log", budget=600)
    os.kill(_pool_pid(db, job_id), SIG_SOFT_TIMEOUT)  # what billiard sends a pool process at its soft time limit
    job = wait_for(lambda: db.ended(job_id), 120, "the job to end")
    assert job.state is JobState.SUCCEEDED, (job.error, worker.log()[-3000:])
    assert db.models(job_id) == ["dense"] and job.attempts == 1  # compression never started
    assert len(db.events(job_id, "time_limit")) == 1
    metrics = db.events(job_id, "succeeded")[0]["metrics"]
    assert isinstance(metrics, dict) and metrics["search_stop"] == "time_limit"
    assert not [c for c in db.events(job_id, "candidate") if c["status"] == "failed"]  # not taken for a failed trial
    db.engine.dispose()


def test_a_second_copy_of_a_running_jobs_task_waits_for_its_lease_and_drops(pg_redis_settings: Settings,
                                                                           digits: Digits,
                                                                           worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    db, first, job_id = _start_training(settings, digits, make_keys(settings.database_url), worker_factory,
                                        "first.log", trained=0)
    second = WorkerProcess(settings, settings.blob_dir.parent / "second.log").wait_ready()
    worker_factory.append(second)
    sender = Celery("netsynth-test", set_as_current=False)
    sender.conf.update(celery_config(settings))
    enqueue_synthesize(sender, db.job(job_id))  # as Redis redelivers a task whose acknowledgement is late
    job = wait_for(lambda: db.ended(job_id), 240, "the job to end")
    assert job.state is JobState.SUCCEEDED, (job.error, first.log()[-3000:])
    wait_for(lambda: re.search(r"succeeded in [0-9.e-]+s: 'finished'", second.log()), 120, "the copy to drop")
    assert job.attempts == 1 and db.kinds(job_id).count("attempt") == 1
    assert db.models(job_id) in (["dense"], ["compressed", "dense"])
    assert "Retry in" in second.log()  # the copy found the job held by a live worker and waited
    db.engine.dispose()


def test_a_job_whose_workers_keep_dying_fails_after_its_last_attempt(pg_redis_settings: Settings, digits: Digits,
                                                                     worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    db, worker, job_id = _start_training(settings, digits, make_keys(settings.database_url), worker_factory,
                                         "worker.log", budget=60, trained=0)
    for attempt in range(1, settings.max_attempts + 1):
        wait_for(functools.partial(_attempts_reach, db, job_id, attempt), 120, f"attempt {attempt}")
        os.kill(_pool_pid(db, job_id), signal.SIGKILL)  # out of memory, every time
    job = wait_for(lambda: db.ended(job_id), 120, "the job to end")
    assert job.state is JobState.FAILED and job.attempts == settings.max_attempts, worker.log()[-3000:]
    assert job.error is not None and f"not retried after {settings.max_attempts} attempts" in job.error
    assert db.models(job_id) == [] and job.device_seconds <= 1.1 * job.budget_seconds
    db.engine.dispose()
