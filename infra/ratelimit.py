"""Request rate limits per API key, with the `limits` library: in Redis when Redis is the task broker (so every API
process shares them), in this process's memory on the embedded default.

A key may send `rate_limit_burst` requests at once and `rate_limit_per_minute` on average: at most `burst` requests
in any moving window of `burst * 60 / per_minute` seconds (at least one second). Like a token bucket of that size
filling at that rate, a full burst is allowed at once; unlike one, the tokens come back as the requests that took
them leave the window. A refused request is told when the oldest request in the window leaves it (`Retry-After`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from limits import RateLimitItemPerSecond
from limits.errors import StorageError
from limits.storage import MemoryStorage, RedisStorage, Storage
from limits.strategies import MovingWindowRateLimiter

from infra.broker import is_redis
from infra.settings import Settings

KEY_PREFIX = "netsynth-rate"
log = logging.getLogger(__name__)


def window(per_minute: int, burst: int) -> tuple[int, int]:
    """(requests, seconds) of the moving window that allows `burst` at once and `per_minute` on average."""
    seconds = max(1, round(60 * burst / per_minute))
    return max(1, round(per_minute * seconds / 60)), seconds


@dataclass
class RateLimiter:
    """A moving-window limit of `requests` per `seconds` for each identifier, kept in `storage`."""

    storage: Storage
    requests: int
    seconds: int

    def __post_init__(self) -> None:
        self._item = RateLimitItemPerSecond(self.requests, self.seconds, namespace="api-key")
        self._strategy = MovingWindowRateLimiter(self.storage)

    def hit(self, identifier: str) -> float | None:
        """Count one request of `identifier`: None when it is allowed, else the seconds until one more would be.

        When the storage does not answer (Redis down), the request is allowed and a warning logged: rate limits
        protect the service, and refusing every request would be the outage they are there to prevent.
        """
        try:
            if self._strategy.hit(self._item, identifier):
                return None
            reset, _ = self._strategy.get_window_stats(self._item, identifier)
        except StorageError as exc:
            log.warning("rate limit storage unavailable, request allowed: %s", exc)
            return None
        return max(0.0, reset - time.time())


class InlineExpiryStorage(MemoryStorage):
    """`limits`' in-memory storage, its old entries dropped inline, at most once every EXPIRE_SECONDS, by the hits
    themselves. The parent starts a timer thread (10 ms) at every hit that finds none alive: with requests more than
    10 ms apart, as pollers' are, that was a thread per request, about half a millisecond of CPU each. Dropping them
    later changes no answer: a moving window counts only the entries inside it."""

    EXPIRE_SECONDS = 1.0

    def __init__(self) -> None:
        super().__init__()
        self._expired_at = time.monotonic()

    def _MemoryStorage__schedule_expiry(self) -> None:  # replaces the parent's private timer
        now = time.monotonic()
        if now - self._expired_at >= self.EXPIRE_SECONDS:
            self._expired_at = now
            self._MemoryStorage__expire_events()  # type: ignore[attr-defined]


def make_limiter(settings: Settings) -> RateLimiter:
    """The limiter `settings` configure: on the Redis broker when it is one, else in memory."""
    storage: Storage
    if is_redis(settings.broker_url):
        storage = RedisStorage(settings.broker_url, key_prefix=KEY_PREFIX, wrap_exceptions=True,
                               socket_connect_timeout=2, socket_timeout=2)
    else:
        storage = InlineExpiryStorage()
    requests, seconds = window(settings.rate_limit_per_minute, settings.rate_limit_burst)
    return RateLimiter(storage, requests, seconds)
