"""Rate limits per user and per client address: a burst at once, then refusals that say when to retry; in memory and
in Redis."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from limits.storage import MemoryStorage, RedisStorage

from infra.ratelimit import KEY_PREFIX, RateLimiter, address_key, make_limits, window
from infra.settings import Settings
from tests.workers.conftest import redis_url

__all__ = ["redis_url"]  # the workers' test Redis fixture (skips when Redis does not answer)



def _limiter(broker_url: str) -> RateLimiter:
    return make_limits(Settings(broker_url=broker_url, rate_limit_per_minute=90, rate_limit_burst=3)).users


@pytest.fixture(params=["memory", "redis"])
def limiter(request: pytest.FixtureRequest) -> RateLimiter:
    """A limiter of 3 requests per 2 s, in memory (the filesystem broker) or in the test Redis (the Redis broker)."""
    if request.param == "memory":
        made = _limiter("filesystem://./var/broker")
        assert isinstance(made.storage, MemoryStorage)
    else:
        made = _limiter(request.getfixturevalue("redis_url"))
        assert isinstance(made.storage, RedisStorage)
    return made


@pytest.mark.parametrize(("per_minute", "burst", "expected"), [
    (600, 120, (120, 12)),  # the defaults: 120 at once, 10 a second on average
    (60, 120, (120, 120)),
    (6000, 1, (100, 1)),  # windows are whole seconds: a burst below a second's rate becomes that rate
    (7, 3, (3, 26)),
])
def test_the_window_keeps_the_burst_and_the_average_rate(per_minute: int, burst: int,
                                                         expected: tuple[int, int]) -> None:
    assert window(per_minute, burst) == expected


def test_a_burst_is_allowed_then_refused_until_the_window_moves(limiter: RateLimiter) -> None:
    key, other = uuid.uuid4().hex, uuid.uuid4().hex
    assert (limiter.requests, limiter.seconds) == (3, 2)
    assert [limiter.hit(key) for _ in range(3)] == [None, None, None]
    retry_after = limiter.hit(key)
    assert retry_after is not None and 0 < retry_after <= 2
    assert limiter.hit(other) is None  # each key has its own limit
    time.sleep(retry_after + 0.05)
    assert limiter.hit(key) is None


def test_a_redis_that_does_not_answer_lets_requests_through() -> None:
    limiter = make_limits(Settings(broker_url="redis://127.0.0.1:1/0", rate_limit_per_minute=60,
                                   rate_limit_burst=1)).users
    assert [limiter.hit("k") for _ in range(3)] == [None, None, None]


def test_redis_keys_are_namespaced_and_expire(redis_url: str) -> None:
    key = uuid.uuid4().hex
    _limiter(redis_url).hit(key)
    client = redis.Redis.from_url(redis_url)
    found = [name.decode() for name in client.scan_iter(f"{KEY_PREFIX}*{key}*")]
    assert len(found) == 1
    assert 0 < client.ttl(found[0]) <= 2  # idle keys leave nothing behind


def test_users_and_addresses_are_counted_apart_in_one_storage() -> None:
    limits = make_limits(Settings(rate_limit_per_minute=60, rate_limit_burst=1,
                                  rate_limit_unauthenticated_per_minute=60, rate_limit_unauthenticated_burst=2))
    assert limits.users.storage is limits.addresses.storage
    assert (limits.users.requests, limits.addresses.requests) == (1, 2)
    assert limits.users.hit("same") is None and limits.users.hit("same") is not None
    assert limits.addresses.hit("same") is None  # the same identifier in the other namespace: its own count


@pytest.mark.parametrize(("host", "key"), [
    ("203.0.113.9", "203.0.113.9"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),  # one client usually holds a whole /64
    ("2001:DB8:1:2::", "2001:db8:1:2::/64"),
    ("::ffff:203.0.113.9", "203.0.113.9"),  # IPv4 mapped into IPv6
    ("testclient", "testclient"),
])
def test_an_address_is_counted_by_its_ipv4_address_or_ipv6_64_network(host: str, key: str) -> None:
    assert address_key(host) == key
