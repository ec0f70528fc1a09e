"""Request rate limits, with the `limits` library: in Redis when Redis is the task broker (so every API process shares
them), in this process's memory on the embedded default. There are two (`RateLimits`):

* each user's requests, whichever of its API keys or browser sessions sent them (`rate_limit_per_minute`,
  `rate_limit_burst`): a user gains nothing by making more keys;
* each client address's requests that did not authenticate (no key, or one that is unknown, wrong or revoked;
  `rate_limit_unauthenticated_per_minute`, `..._burst`): a flood of made-up keys is refused too. An IPv6 address
  counts by its /64 network, which one client usually holds whole.

An identifier may send `burst` requests at once and `per_minute` on average: at most `burst` requests in any moving
window of `burst * 60 / per_minute` seconds (at least one second). Like a token bucket of that size filling at that
rate, a full burst is allowed at once; unlike one, the tokens come back as the requests that took them leave the
window. A refused request is told when the oldest request in the window leaves it (`Retry-After`).
"""

from __future__ import annotations

import ipaddress
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


def address_key(host: str) -> str:
    """The identifier a client address is limited by: an IPv4 address itself, an IPv6 address its /64 network (an IPv4
    address mapped into IPv6 as the IPv4 one), anything else (a name a test client gives) as it is."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass
class RateLimiter:
    """A moving-window limit of `requests` per `seconds` for each identifier in `namespace`, kept in `storage`."""

    storage: Storage
    requests: int
    seconds: int
    namespace: str

    def __post_init__(self) -> None:
        self._item = RateLimitItemPerSecond(self.requests, self.seconds, namespace=self.namespace)
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


@dataclass(frozen=True)
class RateLimits:
    """The API's two limits, kept in one storage: each user's requests, and each client address's requests that did
    not authenticate."""

    users: RateLimiter
    addresses: RateLimiter


def make_limits(settings: Settings) -> RateLimits:
    """The limits `settings` configure: on the Redis broker when it is one, else in memory."""
    storage: Storage
    if is_redis(settings.broker_url):
        storage = RedisStorage(settings.broker_url, key_prefix=KEY_PREFIX, wrap_exceptions=True,
                               socket_connect_timeout=2, socket_timeout=2)
    else:
        storage = InlineExpiryStorage()
    users = window(settings.rate_limit_per_minute, settings.rate_limit_burst)
    addresses = window(settings.rate_limit_unauthenticated_per_minute, settings.rate_limit_unauthenticated_burst)
    return RateLimits(RateLimiter(storage, *users, namespace="user"),
                      RateLimiter(storage, *addresses, namespace="address"))
