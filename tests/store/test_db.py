"""Engines and sessions: SQLite pragmas are on, and session_scope commits or rolls back as a unit."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select, text
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
