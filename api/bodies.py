"""Request bodies are received before a request takes anything that other tenants share (`BodyFirst`).

Why: a route's dependencies check the caller's key and rows with a pooled database connection, and `api.admission`
gives every request a place among the few at work; a body read after them holds both for as long as the client
takes to send it. A client that sends its headers and then stalls would keep a connection (on SQLite, perhaps the
write lock of a due `last_used_at` update) and a place for ever: a handful of stalled bodies stopped every other
user's requests. So a body is read here, outside admission and before any route runs, up to its route's limit
(`reads_body`; `DEFAULT_BODY_BYTES` otherwise), and handed on whole; no wait for the client's next bytes lasts
longer than `NETSYNTH_BODY_TIMEOUT_S`, and past that many seconds a body must keep coming at `MIN_BYTES_PER_S` on
average, after which the request is answered 408 (`BodyTimeout`). A route that streams its own large body (a dataset
upload, to disk) is given the request as it comes, with the same bounds on its waits; it must hold no connection and
no place while it reads (`api.admission.outside`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import BodyTimeout, problem_for
from domain.errors import PayloadTooLarge

DEFAULT_BODY_BYTES = 1024 * 1024
"""Most bytes of the body of a request whose route declares no limit of its own (JSON documents of a few fields)."""
BODY_LIMIT = "netsynth_body_limit"
"""The attribute of an endpoint that holds its body's limit in bytes (`reads_body`)."""

F = TypeVar("F", bound=Callable[..., Any])


def reads_body(limit: int) -> Callable[[F], F]:
    """Mark an endpoint whose body may have up to `limit` bytes (received whole before the route runs)."""
    def mark(endpoint: F) -> F:
        setattr(endpoint, BODY_LIMIT, limit)
        return endpoint
    return mark


def _has_body(scope: Scope) -> bool:
    """Whether the request's headers announce a body (a Content-Length above 0, or a Transfer-Encoding)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.strip().isdigit():
            return int(value)
    return None


MIN_BYTES_PER_S = 500
"""The slowest a body may come on average once its first timeout's seconds are past: each MIN_BYTES_PER_S bytes
received move its deadline a second later (as Apache's mod_reqtimeout MinRate does), so a client that sends a byte
now and then cannot hold a connection for ever, while a slow link still gets its body through."""


def timed_receive(receive: Receive, timeout: float, min_rate: float = MIN_BYTES_PER_S,
                  clock: Callable[[], float] = time.monotonic) -> Receive:
    """`receive`, raising BodyTimeout when the next part of the body takes longer than `timeout` seconds to come, or
    the body as a whole comes slower than `min_rate` bytes a second past its first `timeout` seconds; once the body
    has ended it waits as long as it takes (for the client's disconnect, say)."""
    ended, received, started = False, 0, clock()

    async def timed() -> Message:
        nonlocal ended, received
        if ended:
            return await receive()
        left = started + timeout + received / min_rate - clock()
        try:
            if left <= 0:
                raise TimeoutError
            async with asyncio.timeout(min(timeout, left)):
                message = await receive()
        except TimeoutError:
            if left <= timeout:
                raise BodyTimeout(f"the request body came too slowly: {received} bytes in {clock() - started:.0f} s, "
                                  f"under {min_rate:g} bytes a second past the first {timeout:g} s "
                                  "(NETSYNTH_BODY_TIMEOUT_S); send it again") from None
            raise BodyTimeout(f"the request body stopped coming: nothing arrived for {timeout:g} s "
                              "(NETSYNTH_BODY_TIMEOUT_S); send it again") from None
        received += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            ended = True
        return message

    return timed


class BodyFirst:
    """ASGI middleware, outside `api.admission.Admission`: receive each request's body (within its route's limit and
    `timeout` seconds per wait) before the request goes on; the requests for the `streamed` paths go on at once, each
    wait for their body's next part bounded by `timeout` all the same. Answers 413 past the limit, 408 on a stall."""

    def __init__(self, app: ASGIApp, routes: Callable[[], list[BaseRoute]], timeout: float,
                 streamed: Collection[str] = ()) -> None:
        self.app, self.routes, self.timeout, self.streamed = app, routes, timeout, frozenset(streamed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        timed = timed_receive(receive, self.timeout)
        if scope["path"] in self.streamed:
            await self.app(scope, timed, send)
            return
        limit, match = self._limit(scope)
        try:
            declared = _declared_length(scope)
            if declared is not None and declared > limit:
                raise PayloadTooLarge(f"the request body may be at most {limit} bytes; this one declares {declared}")
            body = await self._read(timed, limit)
        except (BodyTimeout, PayloadTooLarge) as exc:
            scope.update({k: match[k] for k in ("route", "path_params") if k in match})  # logged and counted under it
            response = problem_for(exc, scope["path"])
            response.headers["Connection"] = "close"  # the rest of the body is not read: the connection is done
            await response(scope, receive, send)
            return
        if body is None:  # the client went away: nobody to answer
            return
        await self.app(scope, _replay(body, receive), send)

    def _limit(self, scope: Scope) -> tuple[int, Scope]:
        """The body limit of the route the request is for, and the route's match (empty when none matches)."""
        for route in self.routes():
            match, child = route.matches(scope)
            if match is Match.FULL:
                return int(getattr(child.get("endpoint"), BODY_LIMIT, DEFAULT_BODY_BYTES)), child
        return DEFAULT_BODY_BYTES, {}

    @staticmethod
    async def _read(receive: Receive, limit: int) -> bytes | None:
        """The whole body (None when the client disconnects first); PayloadTooLarge past `limit` bytes."""
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > limit:
                raise PayloadTooLarge(f"the request body may be at most {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` whole first, then whatever `receive` gives (the client's disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
