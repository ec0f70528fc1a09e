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
from collections.abc import Collection

from sqlalchemy import Engine
from sqlalchemy.pool import QueuePool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.fanout import READERS

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

        async def send_and_leave(message: Message) -> None:
            if message["type"] == "http.response.start":
                leave()
            await send(message)

        try:
            await self.app(scope, receive, send_and_leave)
        finally:
            leave()
