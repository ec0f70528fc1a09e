"""RFC 9457 problem+json responses, produced from ONE table that maps exceptions to HTTP statuses."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from domain.errors import (
    AppendOnly,
    BlobStoreUnavailable,
    Conflict,
    DatasetRejected,
    InsufficientStorage,
    InvalidInput,
    InvalidKey,
    InvalidTransition,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    RateLimited,
    TooManyKeys,
    Unavailable,
)

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger(__name__)


class Unauthenticated(Exception):
    """A request carried no API key, or one that is unknown, wrong or revoked."""

    def __init__(self, detail: str, *, invalid_token: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.invalid_token = invalid_token


class CsrfRejected(Exception):
    """A request signed in with the session cookie asked for a change without the session's CSRF token."""


class BodyTimeout(Exception):
    """The request body stopped coming: its next part took longer than NETSYNTH_BODY_TIMEOUT_S (`api.bodies`)."""


@dataclass(frozen=True)
class ProblemType:
    """How one exception class is reported: its HTTP status and a stable problem type slug."""

    status: int
    slug: str

    @property
    def type(self) -> str:
        """The problem's `type` URI."""
        return f"urn:netsynth:problem:{self.slug}"


# THE table: every exception the API reports as other than a 500 is listed here (subclasses inherit).
ERROR_TABLE: dict[type[Exception], ProblemType] = {
    NotFound: ProblemType(404, "not-found"),
    InvalidTransition: ProblemType(409, "invalid-transition"),
    AppendOnly: ProblemType(409, "append-only"),
    InvalidKey: ProblemType(400, "invalid-key"),
    DatasetRejected: ProblemType(422, "dataset-rejected"),
    InvalidInput: ProblemType(422, "invalid-input"),
    Conflict: ProblemType(409, "conflict"),
    TooManyKeys: ProblemType(409, "too-many-api-keys"),
    PayloadTooLarge: ProblemType(413, "payload-too-large"),
    Unavailable: ProblemType(503, "unavailable"),
    BlobStoreUnavailable: ProblemType(503, "unavailable"),  # bucket missing, credentials refused, endpoint down
    InsufficientStorage: ProblemType(507, "insufficient-storage"),
    QuotaExceeded: ProblemType(429, "quota-exceeded"),
    RateLimited: ProblemType(429, "rate-limited"),
    Unauthenticated: ProblemType(401, "unauthenticated"),
    CsrfRejected: ProblemType(403, "csrf-rejected"),
    BodyTimeout: ProblemType(408, "request-timeout"),
    RequestValidationError: ProblemType(422, "validation-error"),
}


def entry_for(error: type[BaseException]) -> ProblemType | None:
    """Return the table entry for the exception class `error` or its nearest listed base class, or None."""
    for cls in error.__mro__:
        if cls in ERROR_TABLE:
            return ERROR_TABLE[cls]
    return None


def lookup(exc: BaseException) -> ProblemType | None:
    """Return the table entry for `exc`'s class or its nearest listed base class, or None."""
    return entry_for(type(exc))


def problem(status: int, detail: str, instance: str, type_: str = "about:blank", **extra: Any) -> JSONResponse:
    """Build a problem+json response; `title` is the status's standard phrase."""
    body: dict[str, Any] = {
        "type": type_,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "instance": instance,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """The validation errors' location, message and type only: never the rejected input itself."""
    return [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in exc.errors()]


def problem_for(exc: Exception, instance: str) -> JSONResponse:
    """Map any exception to its problem response: the table, then HTTPException's own status, else 500."""
    entry = lookup(exc)
    if entry is not None:
        headers: dict[str, str] = {}
        extra: dict[str, Any] = {}
        detail = str(exc)
        if isinstance(exc, Unauthenticated):
            headers["WWW-Authenticate"] = 'Bearer error="invalid_token"' if exc.invalid_token else "Bearer"
        elif isinstance(exc, DatasetRejected | QuotaExceeded | NotFound) and exc.reason is not None:
            extra["reason"] = exc.reason
        elif isinstance(exc, RateLimited):
            headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
        elif isinstance(exc, RequestValidationError):
            detail = "the request is not valid"
            extra["errors"] = jsonable_encoder(_validation_errors(exc))
        response = problem(entry.status, detail, instance, entry.type, **extra)
        response.headers.update(headers)
        return response
    if isinstance(exc, HTTPException):
        response = problem(exc.status_code, str(exc.detail), instance)
        response.headers.update(exc.headers or {})
        return response
    log.exception("unhandled error on %s", instance, exc_info=exc)
    return problem(500, "the server hit an unexpected error", instance)


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    return problem_for(exc, request.url.path)


def install_error_handlers(app: FastAPI) -> None:
    """Route every table entry, every HTTPException and any other exception through `problem_for`."""
    for cls in (*ERROR_TABLE, HTTPException, Exception):
        app.add_exception_handler(cls, _handle)
