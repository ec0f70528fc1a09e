"""Each request's id and its one access line: the `RequestContext` middleware, and the API's logging setup.

A request keeps a valid `X-Request-ID` it came with (else it gets a new one) and answers with it, an unexpected
error's 500 included; every line logged while it is served carries it as `request_id`, and `job_id` (or
`dataset_id`, `model_id`) once its route names one.
With `NETSYNTH_LOG_FORMAT=json`, uvicorn's own lines come out as JSON too, and its access line gives way to ours.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import problem_for
from infra.logs import Field, log_context, setup_logging

REQUEST_ID = "X-Request-ID"
_VALID_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
"""An incoming request id the API keeps: up to 128 letters, digits and . _ : - (anything else is replaced)."""
PATH_IDS = ("job_id", "dataset_id", "model_id")
"""Path parameters that are logged with every line of their request."""
UNMATCHED = "unmatched"
"""The route of a request no route matched (its raw path is not a label: ids would make labels without end)."""

Observer = Callable[[str, str, int, float], None]
"""Told of each finished request: route template, method, status, seconds until the response began."""

access = logging.getLogger("api.access")


def route_of(scope: Scope) -> str:
    """The path template of the route that served the request (e.g. /api/v1/jobs/{job_id}), or UNMATCHED.

    A route included under a prefix knows only its own part of the template (/jobs/{job_id}): the prefix's segments
    are the request path's first ones (the API's prefixes hold no parameters)."""
    template = getattr(scope.get("route"), "path", None)
    if not isinstance(template, str):
        return UNMATCHED
    own = template.strip("/").split("/") if template.strip("/") else []
    path = scope["path"].strip("/").split("/")
    if ":path}" in template or len(path) < len(own):
        return template
    return "/" + "/".join(segment for segment in path[: len(path) - len(own)] + own if segment)


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text: str = value.decode("latin-1")
            if _VALID_ID.fullmatch(text):
                return text
    return uuid.uuid4().hex


def _path_id(scope: Scope, name: str) -> Field:
    def read() -> str | None:
        value = scope.get("path_params", {}).get(name)
        return None if value is None else str(value)
    return read


class RequestContext:
    """ASGI middleware: the request id (header and log field), one access line per request, and `observe(...)`;
    an exception no handler took becomes the opaque 500 problem here, so that it too carries the request id (and
    its logged traceback, the request's fields)."""

    def __init__(self, app: ASGIApp, observe: Observer | None = None) -> None:
        self.app, self.observe = app, observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        started = time.perf_counter()
        status, seconds = 500, None

        async def send_with_id(message: Message) -> None:
            nonlocal status, seconds
            if message["type"] == "http.response.start":
                status, seconds = message["status"], time.perf_counter() - started
                MutableHeaders(scope=message).append(REQUEST_ID, request_id)
            await send(message)

        with log_context(request_id=request_id, **{name: _path_id(scope, name) for name in PATH_IDS}):
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:
                if seconds is not None:  # the response began: too late for a 500, the server closes the connection
                    raise
                await problem_for(exc, scope["path"])(scope, receive, send_with_id)
            finally:
                self._finished(scope, status, time.perf_counter() - started if seconds is None else seconds)

    def _finished(self, scope: Scope, status: int, seconds: float) -> None:
        route, method = route_of(scope), scope["method"]
        if self.observe is not None:
            self.observe(route, method, status, seconds)
        extra: dict[str, Any] = {"method": method, "path": scope["path"], "route": route, "status": status,
                                 "duration_ms": round(seconds * 1000, 3)}
        access.info("%s %s %d %.1f ms", method, scope["path"], status, seconds * 1000, extra=extra)


UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def install_logging(log_format: str) -> None:
    """Set up the API process's logging for `log_format` ("text": as it was; "json": JSON lines, uvicorn's too)."""
    setup_logging(log_format)
    if log_format != "json":
        return
    for name in UVICORN_LOGGERS:  # uvicorn configured them with text handlers of their own: use the root's instead
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)  # api.access logs each request, with more
