"""Fixtures of the end-to-end tests: real PostgreSQL, Redis and Celery worker processes; users with keys."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import redis
from sqlalchemy.orm import Session, sessionmaker

from infra.settings import Settings
from store.apikeys import create_api_key
from store.db import make_engine, make_session_factory, session_scope
from store.migrate import upgrade
from store.models import User
from tests.datasets import digits_arrays, write_image_zip
from tests.services import unavailable
from tests.store.conftest import _fresh_pg_database, pg_skip_reason, s3_server
from tests.workers.service import WorkerProcess

__all__ = ["pg_skip_reason", "s3_server"]
REDIS = os.environ.get("NETSYNTH_TEST_REDIS", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis (NETSYNTH_TEST_REDIS); skips when it does not answer (fails on CI)."""
    try:
        redis.Redis.from_url(REDIS, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        unavailable(f"Redis not reachable at {REDIS} (set NETSYNTH_TEST_REDIS): {exc}")
    return REDIS


@pytest.fixture
def pg_db(pg_skip_reason: str | None) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database."""
    for url in _fresh_pg_database(pg_skip_reason):
        upgrade(url)
        yield url


@pytest.fixture
def pg_redis_settings(pg_db: str, redis_url: str, tmp_path: Path) -> Settings:
    """PostgreSQL + Redis, queues of this test's own for jobs and for explanations (so no other worker takes its
    tasks), short leases, and a rate limit no whole-job test reaches (a loaded machine packs its requests into a few
    seconds; tests/api has the rate limit's own tests)."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    return Settings(database_url=pg_db, broker_url=redis_url, blob_dir=tmp_path / "blobs", default_queue=queue,
                    explain_queue=f"{queue}-explain", lease_seconds=3, rate_limit_burst=100_000,
                    rate_limit_per_minute=1_000_000)


@dataclass(frozen=True)
class Keys:
    """API keys of two users of one database."""

    alice: dict[str, str]
    bob: dict[str, str]


def make_keys(database_url: str) -> Keys:
    """Create two users and return their Authorization headers."""
    engine = make_engine(database_url)
    try:
        factory: sessionmaker[Session] = make_session_factory(engine)
        headers = []
        with session_scope(factory) as s:
            for email in ("alice@example.org", "bob@example.org"):
                user = User(email=email, display_name=email.split("@")[0])
                s.add(user)
                s.flush()
                headers.append({"Authorization": f"Bearer {create_api_key(s, user).plaintext}"})
    finally:
        engine.dispose()
    return Keys(*headers)


@dataclass(frozen=True)
class Digits:
    """scikit-learn's digits: a zip of PNG class folders to upload, and held-out images with their labels."""

    zip_path: Path
    x_test: np.ndarray
    y_test: np.ndarray


@pytest.fixture
def digits(tmp_path: Path) -> Digits:
    """Every sixth digit held out for testing the downloaded model; the rest uploaded as a zip."""
    x, y = digits_arrays()
    held = np.arange(len(y)) % 6 == 0
    path = write_image_zip(tmp_path / "digits.zip", x[~held], y[~held], root="digits")
    return Digits(path, x[held], y[held])


@pytest.fixture
def worker_factory(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Workers a test starts (append to the list); every one is stopped at the end."""
    workers: list[WorkerProcess] = []
    yield workers
    for worker in workers:
        worker.stop()
