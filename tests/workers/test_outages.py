"""A running job survives its broker and its database going away: Redis stopped for 30 s, PostgreSQL restarted.
Each test runs a server of its own (`tests.workers.servers`), so the machine's servers, which other tests use at
the same time, are never touched. An API killed mid-upload keeps no dataset, and the workers sweep away its partial
file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from infra.settings import Settings
from store.blobs import ABANDONED_AFTER_S, PARTIAL, FileBlobStore
from store.migrate import upgrade
from store.models import Dataset, JobState
from tests.services import unavailable
from tests.workers.conftest import Digits, make_keys
from tests.workers.jobs import Db, submit
from tests.workers.servers import PostgresServer, RedisServer, private_postgres_skip_reason
from tests.workers.service import ROOT, WorkerProcess, free_port, settings_env, wait_for
from workers.tasks import sweep_once

OUTAGE_S = 30


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def postgres_server() -> Iterator[PostgresServer]:
    if (reason := private_postgres_skip_reason()) is not None:
        unavailable(reason)
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


def test_the_api_killed_mid_upload_keeps_no_dataset_and_no_file(tmp_path: Path, digits: Digits) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'netsynth.db'}", blob_dir=tmp_path / "blobs",
                        broker_url=f"filesystem://{tmp_path / 'broker'}")
    upgrade(settings.database_url)
    key = make_keys(settings.database_url).alice["Authorization"]
    port = free_port()
    api = subprocess.Popen([sys.executable, "-c", "from api.cli import main; main()", "serve", "--port", str(port)],
                           env=settings_env(settings), cwd=ROOT, start_new_session=True)
    try:
        wait_for(lambda: _listening(port), 60, "the API to listen")
        body = digits.zip_path.read_bytes()
        head = (f"POST /api/v1/datasets HTTP/1.1\r\nHost: test\r\nAuthorization: {key}\r\n"
                f"Content-Type: multipart/form-data; boundary=b0undary\r\nContent-Length: {len(body) + 200}\r\n\r\n"
                '--b0undary\r\nContent-Disposition: form-data; name="file"; filename="digits.zip"\r\n\r\n')
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(head.encode() + body[: len(body) // 2])  # half the file, then the API dies
            time.sleep(1.0)
            os.killpg(api.pid, signal.SIGKILL)
            api.wait()
    finally:
        if api.poll() is None:
            os.killpg(api.pid, signal.SIGKILL)
            api.wait()
    db = Db(settings.database_url)
    with db.factory() as s:
        assert s.scalar(select(func.count()).select_from(Dataset)) == 0
    db.engine.dispose()
    assert not [p for p in Path(settings.blob_dir).rglob("*") if p.is_file()]  # the form spooled to an unnamed file


def test_the_workers_sweep_partial_files_nothing_has_written_for_an_hour(tmp_path: Path) -> None:
    settings = Settings(blob_dir=tmp_path / "blobs")
    staging = FileBlobStore(settings.blob_dir).staging_dir()
    old, live = staging / f"upload-a{PARTIAL}", staging / f"upload-b{PARTIAL}"  # a killed copy and a live upload
    for path in (old, live):
        path.write_bytes(b"half a dataset")
    os.utime(old, (time.time() - ABANDONED_AFTER_S - 60, time.time() - ABANDONED_AFTER_S - 60))
    assert sweep_once(settings) == 1
    assert not old.exists() and live.exists()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
