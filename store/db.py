"""Engines and sessions: one engine per database URL, sessions that commit or roll back as a unit."""

from __future__ import annotations

import select
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _drop_closed(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Refuse a pooled connection the server has closed (restarted, or ended the backend), so that the pool connects
    afresh, without a round trip: an idle connection's socket has nothing to read unless the server said goodbye (its
    last error, then the end of the stream). A pre-ping (`SELECT 1`) would cost a round trip at every checkout; unlike
    one, this does not notice a peer that vanished without a word (the statement then fails, as it would have)."""
    try:
        waiting = select.poll()
        waiting.register(dbapi_connection.fileno(), select.POLLIN)
        closed = bool(waiting.poll(0))
    except Exception as exc:  # the driver's own record of a closed connection
        raise DisconnectionError(str(exc)) from exc
    if closed:
        raise DisconnectionError("the server closed the connection")


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """Return an engine for `url`; SQLite connections enforce foreign keys and use WAL journaling; other databases'
    pooled connections that the server closed are replaced at checkout (`_drop_closed`)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, echo=echo, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_engine(url, echo=echo)
    event.listen(engine, "checkout", _drop_closed)
    return engine


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


_AUTOCOMMIT = {"isolation_level": "AUTOCOMMIT"}


@contextmanager
def read_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """`session_scope` for work that only reads (and may record an API key's use): on PostgreSQL each statement
    commits by itself, so the session sends neither BEGIN nor COMMIT, a round trip each. (A read opens no transaction
    on SQLite anyway.)"""
    with session_scope(factory) as session:
        if session.get_bind().dialect.name != "sqlite":
            session.connection(execution_options=_AUTOCOMMIT)
        yield session
