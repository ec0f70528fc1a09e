"""Engines and sessions: one engine per database URL, sessions that commit or roll back as a unit."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """Return an engine for `url`; SQLite connections enforce foreign keys and use WAL journaling."""
    if url.startswith("sqlite"):
        engine = create_engine(url, echo=echo, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, echo=echo, pool_pre_ping=True)


def hold_write_lock(session: Session) -> None:
    """On SQLite, make `session`'s transaction hold the database's write lock from now until it ends, so that what it
    reads next cannot change before it commits: another transaction that asks for the lock waits (the driver's busy
    timeout, 5 s). Python's sqlite3 runs reads outside any transaction and begins one, deferred, at the first write;
    SQLite ignores `SELECT ... FOR UPDATE`. A transaction that has already written holds the lock already. Other
    databases: nothing (they lock rows: `with_for_update`)."""
    connection = session.connection()
    driver = connection.connection.driver_connection
    if isinstance(driver, sqlite3.Connection) and not driver.in_transaction:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Return a session factory bound to `engine` whose objects stay readable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """Yield a session that commits when the block succeeds and rolls back when it raises."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
