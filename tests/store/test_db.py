"""Engines and sessions: SQLite pragmas are on, and session_scope commits or rolls back as a unit."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import event, select, text
from sqlalchemy.orm import Session, sessionmaker

from store.db import make_engine, make_session_factory, session_scope
from store.models import User
from tests.store.factories import make_user


def test_sqlite_has_foreign_keys_and_wal(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    engine.dispose()


def test_session_scope_commits(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        make_user(s, "kept@example.org")
    with factory() as s:
        assert s.scalars(select(User.email)).all() == ["kept@example.org"]


def test_session_scope_rolls_back_on_error(factory: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError), session_scope(factory) as s:
        make_user(s, "lost@example.org")
        raise RuntimeError("boom")
    with make_session_factory(factory.kw["bind"])() as s:
        assert s.scalars(select(User)).all() == []


def test_a_postgresql_checkout_sends_nothing(pg_url: str, tmp_path: Path) -> None:
    """No pre-ping: taking a pooled connection costs no round trip (`store.db._drop_closed` looks at its socket)."""
    engine = make_engine(pg_url)
    log = tmp_path / "libpq.trace"
    with log.open("w") as out:
        event.listen(engine, "connect", lambda dbapi_connection, _record: dbapi_connection.pgconn.trace(out.fileno()))
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        sent = log.read_text().count("\tF\t")
        for _ in range(3):
            with engine.connect():
                pass
        assert log.read_text().count("\tF\t") == sent
    engine.dispose()


def test_a_postgresql_connection_the_server_closed_is_replaced_at_checkout(pg_url: str) -> None:
    """What the pre-ping was there for: after the server ends a pooled connection's backend (a restart, or
    pg_terminate_backend), the next checkout connects afresh instead of failing the request."""
    engine = make_engine(pg_url)
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
    with psycopg.connect(pg_url.replace("+psycopg", ""), autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        for _ in range(500):  # until the backend has gone: its goodbye is in the pooled connection's socket
            if admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == (0,):
                break
            time.sleep(0.01)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT pg_backend_pid()")).scalar() != pid
    engine.dispose()
