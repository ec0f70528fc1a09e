"""Telling the API's event streams that a job has a new event, so that they need not poll the database for it.

Every new `job_events` row is announced (a mapper event: importing this module, as `store.jobs` does, turns it on). On
PostgreSQL the insert's transaction sends `NOTIFY netsynth_job_events, '<job id>'`:
PostgreSQL delivers it at commit (never for a rolled-back event), to every connection that LISTENs, in any process.
A `Listener` is such a connection, in a thread of its own. On other databases (SQLite) the notice only reaches
subscribers in the writer's own process, after its commit (`subscribe`); readers there still poll for writers in
other processes. Reference: https://www.postgresql.org/docs/current/sql-notify.html.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable

import psycopg
from sqlalchemy import Connection, Engine, event, func, select
from sqlalchemy.orm import Mapper, Session, object_session

from store.models import JobEvent

CHANNEL = "netsynth_job_events"
"""The PostgreSQL notification channel; each notification's payload is a job id."""
_PENDING = "netsynth_notify_pending"
"""`Session.info` key: ids of jobs with new events in the session's transaction (not PostgreSQL)."""
RETRY_SECONDS = 1.0
"""How long a listener waits before it connects again after losing its connection."""

OnEvent = Callable[[uuid.UUID | None], None]
"""Called with the id of a job that has new events, or None when any job may have (a listener reconnected)."""

log = logging.getLogger(__name__)
_local: list[OnEvent] = []
_local_lock = threading.Lock()


@event.listens_for(JobEvent, "after_insert")
def _notify(_mapper: Mapper[JobEvent], connection: Connection, target: JobEvent) -> None:
    """Announce, once the inserting transaction commits, that the event's job has a new event."""
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_notify(CHANNEL, str(target.job_id))))
    elif (session := object_session(target)) is not None:
        session.info.setdefault(_PENDING, set()).add(target.job_id)


def subscribe(callback: OnEvent) -> Callable[[], None]:
    """Call `callback(job_id)` after each commit in this process that added events (not on PostgreSQL, where a
    Listener hears every process); returns the function that unsubscribes. Callbacks run on the committing thread."""
    with _local_lock:
        _local.append(callback)

    def unsubscribe() -> None:
        with _local_lock, contextlib.suppress(ValueError):
            _local.remove(callback)
    return unsubscribe


@event.listens_for(Session, "after_commit")
def _announce(session: Session) -> None:
    pending: set[uuid.UUID] | None = session.info.pop(_PENDING, None)
    if not pending:
        return
    with _local_lock:
        callbacks = list(_local)
    for job_id in pending:
        for callback in callbacks:
            callback(job_id)


@event.listens_for(Session, "after_rollback")
def _forget(session: Session) -> None:
    session.info.pop(_PENDING, None)


def conninfo(engine: Engine) -> str:
    """The libpq connection string of a PostgreSQL engine (SQLAlchemy's driver name removed)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class Listener:
    """A thread with one PostgreSQL connection that LISTENs on CHANNEL and calls `on_event(job_id)` for each
    notification; after (re)connecting it calls `on_event(None)`, since notifications may have been missed."""

    def __init__(self, engine: Engine, on_event: OnEvent, poll_s: float = 0.5) -> None:
        self.conninfo, self.on_event, self.poll_s = conninfo(engine), on_event, poll_s
        self.listening = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-events-listener", daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to close its connection and end (within `poll_s`); does not wait for it."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except (psycopg.Error, OSError) as exc:
                log.warning("job event listener: %s; reconnecting in %.0f s", str(exc).strip(), RETRY_SECONDS)
            self.listening = False
            self._stop.wait(RETRY_SECONDS)

    def _listen(self) -> None:
        with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.listening = True
            self.on_event(None)
            while not self._stop.is_set():
                for note in conn.notifies(timeout=self.poll_s):
                    try:
                        job_id = uuid.UUID(note.payload)
                    except ValueError:
                        continue
                    self.on_event(job_id)
