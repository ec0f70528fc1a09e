"""What the client raises: `ApiError` for a problem the API answered, `ConnectionFailed` when it could not be
reached; both are `NetsynthError`s."""

from __future__ import annotations

import json
from typing import Any


class NetsynthError(Exception):
    """Any failure of a call to the netsynth API."""


class ConnectionFailed(NetsynthError):
    """The service could not be reached (refused, reset, timed out), after the retries the call allows."""


class ApiError(NetsynthError):
    """The API answered an error: an RFC 9457 problem (`status`, `title`, `detail`, `reason`, `type`; `body` is the
    whole problem object, `retry_after` the seconds a 429 or 503 asked to wait)."""

    def __init__(self, status: int, body: dict[str, Any], retry_after: float | None = None) -> None:
        self.status = status
        self.body = body
        self.title = str(body.get("title") or "")
        self.detail = str(body.get("detail") or "")
        self.type = str(body.get("type") or "about:blank")
        reason = body.get("reason")
        self.reason: str | None = None if reason is None else str(reason)
        self.retry_after = retry_after
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.status} {self.title}".rstrip()
        if self.detail:
            text += f": {self.detail}"
        return f"{text} ({self.reason})" if self.reason else text

    @classmethod
    def from_response(cls, status: int, content: bytes, retry_after: float | None = None) -> ApiError:
        """The error of an answer with status `status` and body `content` (a problem, or anything else)."""
        try:
            body = json.loads(content)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            text = content.decode("utf-8", "replace").strip()
            body = {"status": status, "title": "", "detail": text[:500]}
        return cls(status, body, retry_after)
