"""A running job survives its broker and its database going away: Redis stopped for 30 s, PostgreSQL restarted.
Each test runs a server of its own (`tests.workers.servers`), so the machine's servers, which other tests use at
the same time, are never touched."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.migrate import upgrade
from store.models import JobState
from store.settings import Settings
from tests.workers.conftest import Digits, make_keys
from tests.workers.jobs import Db, submit
from tests.workers.servers import PostgresServer, RedisServer, private_postgres_skip_reason
from tests.workers.service import WorkerProcess, wait_for

OUTAGE_S = 30


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def postgres_server() -> Iterator[PostgresServer]:
    if (reason := private_postgres_skip_reason()) is not None:
        pytest.skip(reason)
    server = PostgresServer().start()
    yield server
    server.close()


def _running(settings: Settings, digits: Digits, workers: list[WorkerProcess], budget: int) -> tuple[Db, uuid.UUID]:
    """Start a worker, submit a digits job and wait until the search has trained a candidate."""
    db = Db(settings.database_url)
    worker = WorkerProcess(settings, settings.blob_dir.parent / "worker.log").wait_ready()
    workers.append(worker)
    job_id = submit(settings, digits, make_keys(settings.database_url), budget)
    wait_for(lambda: any(c["curve"] for c in db.events(job_id, "candidate")), 300, "a trained candidate")
    return db, job_id


def _ended_once_with_one_model(db: Db, job_id: uuid.UUID, worker: WorkerProcess) -> None:
    job = wait_for(lambda: db.ended(job_id), 400, "the job to end")
    assert job.state is JobState.SUCCEEDED, (job.error, worker.log()[-3000:])
    assert db.models(job_id) in (["dense"], ["compressed", "dense"])  # one per variant
    assert db.kinds(job_id).count("succeeded") == 1
    db.engine.dispose()


def test_redis_stopped_for_30_s_mid_job_then_started_the_job_finishes(pg_db: str, redis_server: RedisServer,
                                                                       digits: Digits, tmp_path: Path,
                                                                       worker_factory: list[WorkerProcess]) -> None:
    settings = Settings(database_url=pg_db, broker_url=redis_server.url, blob_dir=tmp_path / "blobs",
                        default_queue="outage", lease_seconds=3)
    db, job_id = _running(settings, digits, worker_factory, budget=90)
    redis_server.stop()
    time.sleep(OUTAGE_S)
    redis_server.start()
    _ended_once_with_one_model(db, job_id, worker_factory[0])


def test_postgres_restarted_mid_job_the_job_finishes(postgres_server: PostgresServer, redis_url: str, digits: Digits,
                                                    tmp_path: Path, worker_factory: list[WorkerProcess]) -> None:
    upgrade(postgres_server.url)
    settings = Settings(database_url=postgres_server.url, broker_url=redis_url, blob_dir=tmp_path / "blobs",
                        default_queue=f"test-{uuid.uuid4().hex[:8]}", lease_seconds=3)
    db, job_id = _running(settings, digits, worker_factory, budget=60)
    postgres_server.restart()  # every connection of the worker and of this test is cut
    _ended_once_with_one_model(db, job_id, worker_factory[0])
