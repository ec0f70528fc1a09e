"""One reader of a job's event log per API process, however many clients stream it (`Hub`, `Feed`).

A `Feed` reads the job's state and new events for all of its watchers: when told (PostgreSQL LISTEN/NOTIFY through a
`store.notify.Listener`, or a commit in this process on other databases), and otherwise every `POLL_SECONDS` (for
writers the process cannot hear: other processes on SQLite) or every `NOTIFIED_POLL_SECONDS` while the listener is
up (for changes that come without an event, such as a deleted job). Each watcher reads its own backlog once, when it
starts, then takes new events from its feed's memory: the database work does not grow with the number of watchers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
import anyio.to_thread
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.schemas.jobs import JobEventOut
from store.db import read_scope
from store.jobs import TERMINAL, events_since
from store.models import Job, JobEvent, JobState
from store.notify import Listener, subscribe

POLL_SECONDS = 0.25
"""How often a feed reads when it may not be told of new events (SQLite: writers in other processes)."""
NOTIFIED_POLL_SECONDS = 1.0
"""How often a feed reads while PostgreSQL notifications are heard (state changes without an event)."""

READERS = 3
"""Threads (each with a connection at most) that read for the event streams of one API process: their own, so that
the streams never wait for the threads requests use, and `api.admission` keeps connections for them."""

T = TypeVar("T")
log = logging.getLogger(__name__)
_readers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


async def in_reader(read: Callable[..., T], *args: object) -> T:
    """`read(*args)` in one of the READERS threads of this event loop."""
    loop = asyncio.get_running_loop()
    limiter = _readers.get(loop)
    if limiter is None:
        limiter = _readers[loop] = anyio.CapacityLimiter(READERS)
    return await anyio.to_thread.run_sync(read, *args, limiter=limiter)


@dataclass(frozen=True)
class Poll:
    """A job's state (None once deleted) and then its events after some seq, read in one short session."""

    state: JobState | None
    events: list[JobEventOut]


def read_poll(factory: sessionmaker[Session], job_id: uuid.UUID, after: int) -> Poll:
    """The job's state, then its events after `after`: when the state is terminal, every event is in the list."""
    with read_scope(factory) as session:
        job = session.get(Job, job_id)
        if job is None:
            return Poll(None, [])
        return Poll(JobState(job.state), [JobEventOut.model_validate(e) for e in events_since(session, job, after)])


def _read_head(factory: sessionmaker[Session], job_id: uuid.UUID) -> tuple[JobState | None, int]:
    """The job's state (None once deleted) and the seq of its latest event (0: none)."""
    with read_scope(factory) as session:
        job = session.get(Job, job_id)
        if job is None:
            return None, 0
        last = session.scalar(select(func.max(JobEvent.seq)).where(JobEvent.job_id == job_id))
        return JobState(job.state), int(last or 0)


class Watch:
    """One client's place in a feed: `after` is the last seq it was sent (the feed keeps every event past it)."""

    def __init__(self, feed: Feed, after: int) -> None:
        self.feed, self.after = feed, after


class Feed:
    """A job's events since the feed began, read by one task for all its watchers."""

    def __init__(self, hub: Hub, job_id: uuid.UUID) -> None:
        self.hub, self.job_id = hub, job_id
        self.state: JobState | None = None
        self.cursor = 0
        self.events: list[JobEventOut] = []  # every event with seq in (the lowest watcher's after, cursor]
        self.watches: set[Watch] = set()
        self.ready = asyncio.Event()
        self.changed = asyncio.Event()  # set, then replaced, whenever the state or the events change
        self.wake = asyncio.Event()
        self.done = False
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"feed-{job_id}")

    @property
    def ended(self) -> bool:
        """Whether the job is gone or finished: the feed reads no more."""
        return self.ready.is_set() and (self.state is None or self.state in TERMINAL)

    def newer(self, after: int) -> list[JobEventOut]:
        """The events read so far with a seq above `after`, oldest first."""
        return [e for e in self.events if e.seq > after]

    def trim(self) -> None:
        """Forget the events every watcher has been sent."""
        if self.watches:
            floor = min(w.after for w in self.watches)
            self.events = [e for e in self.events if e.seq > floor]

    async def _run(self) -> None:
        try:
            head = None
            while head is None:
                if not self.watches:
                    return
                head = await self._read(_read_head, self.hub.factory, self.job_id)
            self.state, self.cursor = head
            self.ready.set()
            while not self.ended:
                await self._wait()
                if not self.watches:
                    break
                self.wake.clear()  # before reading: a notice that comes during the read means read again
                poll = await self._read(read_poll, self.hub.factory, self.job_id, self.cursor)
                if poll is not None and (poll.events or poll.state != self.state):
                    self.state = poll.state
                    self.events.extend(poll.events)
                    self.cursor = poll.events[-1].seq if poll.events else self.cursor
                    self.trim()
                    self._signal()
        finally:
            self.done = True
            self.ready.set()
            self._signal()
            self.hub.drop(self)

    async def _read(self, read: Callable[..., T], *args: object) -> T | None:
        """`read(*args)` in a worker thread; None (after a pause) when the database fails, to try again."""
        try:
            return await in_reader(read, *args)
        except SQLAlchemyError as exc:
            log.warning("job %s: reading its events failed: %s", self.job_id, str(exc).splitlines()[0])
            await self._wait()
            return None

    async def _wait(self) -> None:
        interval = NOTIFIED_POLL_SECONDS if self.hub.listening else POLL_SECONDS
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), interval)

    def _signal(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class Hub:
    """The feeds of one API process (one event loop and session factory), and what wakes them."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory
        self.loop = asyncio.get_running_loop()
        self.feeds: dict[uuid.UUID, Feed] = {}
        self._listener: Listener | None = None
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def listening(self) -> bool:
        """Whether PostgreSQL notifications are being heard right now."""
        return self._listener is not None and self._listener.listening

    @contextlib.asynccontextmanager
    async def watch(self, job_id: uuid.UUID, after: int) -> AsyncIterator[Watch]:
        """Follow job `job_id` from seq `after`, in the job's feed (started if there is none)."""
        feed = self.feeds.get(job_id)
        if feed is None:
            feed = self.feeds[job_id] = Feed(self, job_id)
            self._hear()
        watch = Watch(feed, after)
        feed.watches.add(watch)
        try:
            yield watch
        finally:
            feed.watches.discard(watch)
            if not feed.watches:
                feed.wake.set()

    def drop(self, feed: Feed) -> None:
        """Forget an ended feed; stop listening once no feed is left."""
        if self.feeds.get(feed.job_id) is feed:
            del self.feeds[feed.job_id]
        if not self.feeds:
            self.close()

    def _hear(self) -> None:
        """Start hearing of new events, if nothing hears them yet."""
        if self._listener is not None or self._unsubscribe is not None:
            return
        engine: Engine = self.factory.kw["bind"]
        if engine.dialect.name == "postgresql":
            self._listener = Listener(engine, self._notified).start()
        else:
            self._unsubscribe = subscribe(self._notified)

    def _notified(self, job_id: uuid.UUID | None) -> None:
        """From any thread: job `job_id` (None: any job) may have new events."""
        with contextlib.suppress(RuntimeError):  # the loop has closed
            self.loop.call_soon_threadsafe(self._wake, job_id)

    def _wake(self, job_id: uuid.UUID | None) -> None:
        for feed in list(self.feeds.values()) if job_id is None else filter(None, [self.feeds.get(job_id)]):
            feed.wake.set()

    def close(self) -> None:
        """Stop hearing of new events (feeds still running fall back to polling)."""
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None


_hubs: weakref.WeakKeyDictionary[sessionmaker[Session], Hub] = weakref.WeakKeyDictionary()


def hub_for(factory: sessionmaker[Session]) -> Hub:
    """The hub of `factory` in the running event loop (one per API process)."""
    hub = _hubs.get(factory)
    if hub is None or hub.loop is not asyncio.get_running_loop():
        hub = _hubs[factory] = Hub(factory)
    return hub


def close_hub(factory: sessionmaker[Session]) -> None:
    """Stop the hub of `factory`, if it has one: its listener, and every feed's task."""
    hub = _hubs.pop(factory, None)
    if hub is not None:
        for feed in list(hub.feeds.values()):
            feed.task.cancel()
        hub.close()
