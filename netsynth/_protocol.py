"""The client's sans-I/O core: what a request is, when to retry it, how an event stream is read and resumed.

Nothing here does network I/O or sleeps; the sync and async transports (`client`, `aio`) carry the `Call`s out.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from netsynth.errors import ApiError, ConnectionFailed
from netsynth.types import Event

API = "/api/v1"
RETRY_STATUSES = frozenset({429, 503})
MAX_ATTEMPTS = 5
"""Tries of a call answered 429 or 503 (and of an idempotent call that cannot connect: `MAX_CONNECT_ATTEMPTS`)."""
MAX_CONNECT_ATTEMPTS = 3
MAX_WAIT_S = 60.0
"""The longest wait between tries, whatever Retry-After says."""
MAX_RECONNECTS = 8
"""Consecutive reconnections of a watch that bring no new event before it gives up."""


@dataclass(frozen=True)
class Upload:
    """A file sent as a multipart part, read from disk as it is sent."""

    field: str
    path: Path
    filename: str


@dataclass(frozen=True)
class Call:
    """One API request: where, what it sends, whether it may be sent again after a connection failure, and where a
    streamed answer goes (`sink`: a file, written whole or not at all)."""

    method: str
    path: str
    params: Mapping[str, str | int] | None = None
    json: Any = None
    data: Mapping[str, str] | None = None
    files: list[tuple[str, tuple[str, bytes]]] | None = None
    upload: Upload | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    sink: Path | None = None
    label: str = ""

    @property
    def idempotent(self) -> bool:
        """Whether a retry after a connection failure cannot do the thing twice."""
        return self.method in ("GET", "HEAD")


@dataclass(frozen=True)
class Reply:
    """An answer: its status, headers and body (empty when it went to the call's `sink`)."""

    status: int
    headers: Mapping[str, str]
    content: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.content)


@dataclass(frozen=True)
class Sleep:
    """Wait this long before the next call (an operation polling)."""

    seconds: float


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The seconds a `Retry-After` header asks to wait (a number or an HTTP date), None without a readable one."""
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def delay_after_reply(reply: Reply, attempt: int, max_attempts: int = MAX_ATTEMPTS) -> float | None:
    """How long to wait before trying `reply`'s call again (attempt `attempt`, from 0), None: do not."""
    if reply.status not in RETRY_STATUSES or attempt + 1 >= max_attempts:
        return None
    wait = retry_after(reply.headers)
    return min(MAX_WAIT_S, float(2**attempt) if wait is None else wait)


def delay_after_failure(call: Call, attempt: int, error: Exception) -> float:
    """How long to wait before sending `call` again after it could not connect; ConnectionFailed: do not."""
    if not call.idempotent or attempt + 1 >= MAX_CONNECT_ATTEMPTS:
        raise ConnectionFailed(f"{call.method} {call.path}: {error or type(error).__name__}") from error
    return 0.5 * float(2**attempt)


def checked(reply: Reply) -> Reply:
    """`reply` when it is a success, else the ApiError it carries."""
    if reply.status >= 400:
        raise ApiError.from_response(reply.status, reply.content, retry_after(reply.headers))
    return reply


class Bar(Protocol):
    """Where a transfer reports its bytes."""

    def advance(self, count: int) -> None: ...

    def restart(self) -> None: ...


class _Counted:
    """A binary file that reports what is read from it; reading from the start again restarts the count."""

    def __init__(self, raw: IO[bytes], bar: Bar) -> None:
        self.raw, self.bar = raw, bar

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        self.bar.advance(len(chunk))
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        if offset == 0 and whence == 0:
            self.bar.restart()
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def fileno(self) -> int:
        return self.raw.fileno()


@contextmanager
def multipart(call: Call, bar: Bar) -> Iterator[dict[str, Any]]:
    """The `files` and `data` arguments of `call` for httpx, its upload open as a file read while it is sent."""
    parts: dict[str, Any] = {"data": dict(call.data or {}) or None, "files": list(call.files or []) or None}
    if call.upload is None:
        yield parts
        return
    with call.upload.path.open("rb") as raw:
        parts["files"] = [(call.upload.field, (call.upload.filename, _Counted(raw, bar)))]
        yield parts


@dataclass
class SseParser:
    """Lines of a Server-Sent Events stream in, whole messages (`id`, `event`, `data`) out."""

    fields: dict[str, str] = field(default_factory=dict)

    def feed(self, line: str) -> dict[str, str] | None:
        """Take one line (without its end); the message it completes, if any."""
        if not line:
            message, self.fields = self.fields, {}
            return message if "data" in message else None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        self.fields[name] = self.fields[name] + "\n" + value if name == "data" and name in self.fields else value
        return None


@dataclass
class WatchState:
    """Where a watch of a job's events stands: the last seq received (what a reconnection resumes after), whether
    the stream ended, and how many reconnections in a row brought nothing."""

    job_id: str
    last_seq: int = 0
    ended: bool = False
    failures: int = 0
    parser: SseParser = field(default_factory=SseParser)

    def call(self) -> Call:
        """The request that (re)opens the stream after the last event received."""
        self.parser = SseParser()  # a message cut by a dropped connection is not one
        headers = {"Accept": "text/event-stream"}
        if self.last_seq:
            headers["Last-Event-ID"] = str(self.last_seq)
        return Call("GET", f"{API}/jobs/{self.job_id}/events", headers=headers)

    def feed(self, line: str) -> Event | None:
        """Take one line of the stream; the new event it completes, if any (a repeated seq is dropped)."""
        message = self.parser.feed(line)
        if message is None:
            return None
        data = json.loads(message["data"])
        if message.get("event") == "end":
            self.ended = True
            return Event(seq=None, at="", kind="end", payload=data)
        seq = int(message.get("id") or data["seq"])
        if seq <= self.last_seq:
            return None
        self.last_seq, self.failures = seq, 0
        return Event(seq=seq, at=data["at"], kind=data["kind"], payload=data["payload"])

    def dropped(self, error: Exception | None) -> float:
        """The stream closed before its end (or could not open): the wait before reopening it."""
        self.failures += 1
        if self.failures > MAX_RECONNECTS:
            raise ConnectionFailed(f"the event stream of job {self.job_id} kept dropping: {error}") from error
        return min(MAX_WAIT_S / 4, 0.25 * float(2 ** (self.failures - 1)))
