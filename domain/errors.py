"""Domain errors: what the product refuses or cannot find (raised by `domain/` and `store/`); the API maps them to
HTTP statuses in one table (`api/errors.py`), the workers to job failures."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every store error."""


class NotFound(StoreError):
    """A requested row or blob does not exist; `reason`, when given, is a stable slug saying what is missing of a
    thing that exists (e.g. 'report-absent': the model exists, its report does not)."""

    def __init__(self, detail: str = "", reason: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason


class InvalidTransition(StoreError):
    """A job was asked to move to a state its current state cannot reach."""

    def __init__(self, current: str, requested: str) -> None:
        super().__init__(f"a job cannot go from {current!r} to {requested!r}")
        self.current = current
        self.requested = requested


class AppendOnly(StoreError):
    """An append-only row (a job event) was updated or deleted."""


class InvalidKey(StoreError):
    """A blob key is malformed or escapes the blob store's root."""


class DatasetRejected(StoreError):
    """An uploaded dataset failed validation; `reason` is a stable slug (e.g. 'zip-bomb', 'too-few-classes')."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class InvalidInput(StoreError):
    """A request's content is well-formed but cannot be used (e.g. predict inputs of the wrong kind)."""


class Conflict(StoreError):
    """The request conflicts with the current state (e.g. a dataset name already taken, a dataset still in use)."""


class TooManyKeys(Conflict):
    """A user already has as many API keys as it may have (NETSYNTH_MAX_API_KEYS): deleting one makes room."""


class PayloadTooLarge(StoreError):
    """An upload exceeds the configured size limit."""


class Unavailable(StoreError):
    """A service the request needs (the task broker) does not answer; retrying later may succeed."""


class InsufficientStorage(StoreError):
    """The blob store is out of space (or its quota): nothing was written; retrying after space is freed may work."""


class QuotaExceeded(StoreError):
    """A user's quota would be exceeded; `reason` is a stable slug (`quota-active-jobs`, `quota-device-seconds`,
    `quota-storage`) and `detail` says what would free it."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class RateLimited(StoreError):
    """A user (or, for requests that do not authenticate, a client address) sent more requests than its rate allows;
    `retry_after` is the seconds until one more is allowed."""

    def __init__(self, retry_after: float, detail: str = "too many requests") -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.detail = detail


class BlobStoreUnavailable(Unavailable):
    """The blob store cannot be used: its bucket is missing, it refuses the service's credentials or it does not
    answer; the message says which (nothing was written)."""
