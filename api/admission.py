"""At most as many requests at work in an API process as its database pool has connections for; the others wait here.

Why: a request takes a pooled connection in its first dependency that reads (the API key's lookup) and keeps it
until its session closes, and between those steps it waits for a thread of the shared thread pool (40 threads). With
more requests in flight than connections, every thread can end up blocked waiting for a connection while the
requests that hold the connections wait for a thread: nothing moves until the pool's timeout (30 s) fails them with
500s. `bench/load.py` measured exactly that: 200 pollers and 100 event streams on two processes gave 515 errors
in two minutes and 3.5 requests per second. Admitting no more requests than there are connections (less those kept
for the event streams' readers, which have threads of their own: `api.fanout.READERS`) lets every admitted request
get a connection, so none waits for one while holding a thread. A request leaves as its response begins (its
session has closed by then), so an event stream holds no place while it streams. The exempt paths (the health
probe, the metrics scrape) never wait: a probe must answer however busy the API is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection

from sqlalchemy import Engine
from sqlalchemy.pool import QueuePool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.fanout import READERS

PLACE = "netsynth.admission"
"""The scope key of a request's place: its `(leave, enter)` pair (`outside`)."""
UNBOUNDED_POOL_LIMIT = 40
"""The limit when the pool does not bound its connections: the thread pool's size."""


def admission_limit(engine: Engine) -> int:
    """How many requests may be at work at once: the engine's connections less the event streams' readers."""
    pool = engine.pool
    if not isinstance(pool, QueuePool) or pool._max_overflow < 0:  # no public accessor of the overflow
        return UNBOUNDED_POOL_LIMIT
    return max(1, pool.size() + pool._max_overflow - READERS)


class Admission:
    """ASGI middleware: at most `limit` HTTP requests between their start and their response's start; requests
    for the `exempt` paths are not counted and never wait."""

    def __init__(self, app: ASGIApp, limit: int, exempt: Collection[str] = ()) -> None:
        self.app, self.limit, self.exempt = app, limit, frozenset(exempt)
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            self._slots, self._loop = asyncio.Semaphore(self.limit), loop
        return self._slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        slots = self._semaphore()
        await slots.acquire()
        held = True

        def leave() -> None:
            nonlocal held
            if held:
                held = False
                slots.release()

        async def enter() -> None:
            nonlocal held
            if not held:
                await slots.acquire()
                held = True

        scope[PLACE] = (leave, enter)

        async def send_and_leave(message: Message) -> None:
            if message["type"] == "http.response.start":
                leave()
            await send(message)

        try:
            await self.app(scope, receive, send_and_leave)
        finally:
            leave()


@contextlib.asynccontextmanager
async def outside(scope: Scope) -> AsyncIterator[None]:
    """Give up the request's place while the block runs (a long wait that needs no database connection, such as
    receiving an upload's body; the request must hold none), and wait for one again after it."""
    place = scope.get(PLACE)
    if place is None:  # not behind Admission (an exempt path, or an app without it)
        yield
        return
    leave, enter = place
    leave()
    try:
        yield
    finally:
        await enter()
