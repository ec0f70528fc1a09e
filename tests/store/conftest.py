"""Database fixtures: every DB test runs on a fresh SQLite file and, when reachable, a fresh PostgreSQL database."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from store.db import make_engine, make_session_factory
from store.migrate import upgrade
from tests.services import unavailable
from tests.store.s3server import S3Server, s3_skip_reason

PG_ADMIN = os.environ.get("NETSYNTH_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _pg_reason() -> str | None:
    try:
        with psycopg.connect(PG_ADMIN, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL not reachable at {PG_ADMIN} (set NETSYNTH_TEST_PG): {exc}".splitlines()[0]


@pytest.fixture(scope="session")
def pg_skip_reason() -> str | None:
    return _pg_reason()


def _fresh_pg_database(reason: str | None) -> Iterator[str]:
    if reason is not None:
        unavailable(reason)
    name = f"netsynth_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path, pg_skip_reason: str | None) -> Iterator[str]:
    """URL of an empty database: a temporary SQLite file, or a uniquely named PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'netsynth.db'}"
    else:
        yield from _fresh_pg_database(pg_skip_reason)


@pytest.fixture
def pg_url(pg_skip_reason: str | None) -> Iterator[str]:
    """URL of an empty, uniquely named PostgreSQL database (skips when the server is unreachable)."""
    yield from _fresh_pg_database(pg_skip_reason)


@pytest.fixture
def engine(empty_db_url: str) -> Iterator[Engine]:
    """An engine on a database migrated to the latest revision."""
    upgrade(empty_db_url)
    eng = make_engine(empty_db_url)
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def factory(engine: Engine) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def session(factory: sessionmaker[Session]) -> Iterator[Session]:
    with factory() as s:
        yield s


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real S3-compatible server (SeaweedFS) for the session; skips when `weed` is missing, fails on CI."""
    if (reason := s3_skip_reason()) is not None:
        unavailable(reason)
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()
