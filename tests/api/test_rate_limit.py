"""Rate limits per user and, for requests that do not authenticate, per client address: past its burst a user's
requests (whichever of its keys sent them) or an address's unauthenticated ones are 429 problems with `Retry-After`,
in memory on the filesystem broker and in Redis (shared by every API process) on the Redis broker; health is never
limited."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from infra.settings import Settings
from store.apikeys import create_api_key
from store.db import session_scope
from store.models import User
from tests.api.conftest import Account, assert_problem, make_account
from tests.workers.conftest import redis_url

__all__ = ["redis_url"]  # the workers' test Redis fixture (skips when Redis does not answer)

pytestmark = pytest.mark.anyio
LIMITED: dict[str, Any] = {"rate_limit_per_minute": 60, "rate_limit_burst": 2}
"""2 requests at once, then one a second: a window of 2 requests per 2 s."""
FAILURES: dict[str, Any] = {"rate_limit_unauthenticated_per_minute": 60, "rate_limit_unauthenticated_burst": 2}
"""2 requests that do not authenticate at once, then one a second (the window of LIMITED)."""
BAD = {"Authorization": "Bearer ns_" + "x" * 43}
"""A key that looks like one and is no one's."""


@asynccontextmanager
async def serving(settings: Settings, *, address: str = "127.0.0.1",
                  **changes: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app on `settings` with `changes`, connecting from `address`."""
    app = create_app(settings.model_copy(update=changes))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=(address, 40000))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client
    finally:
        app.state.engine.dispose()


async def _exhaust(client: httpx.AsyncClient, auth: dict[str, str]) -> httpx.Response:
    """Send the burst, then one more request: the refused one."""
    for _ in range(LIMITED["rate_limit_burst"]):
        assert (await client.get("/api/v1/me", headers=auth)).status_code == 200
    return await client.get("/api/v1/me", headers=auth)


def _assert_limited(r: httpx.Response) -> None:
    body = assert_problem(r, 429)
    assert body["type"] == "urn:netsynth:problem:rate-limited"
    assert r.headers["retry-after"] in {"1", "2"}  # the 2 s window, less the time the burst took, rounded up


async def test_past_its_burst_a_key_is_429_with_retry_after_in_memory(settings: Settings, account: Account) -> None:
    async with serving(settings, **LIMITED) as client:
        _assert_limited(await _exhaust(client, account.auth))
        for _ in range(5):  # health and the OpenAPI document are not limited
            assert (await client.get("/api/v1/health")).status_code == 200
            assert (await client.get("/api/v1/openapi.json")).status_code == 200


async def test_a_users_keys_share_its_limit_and_another_user_has_its_own(
        settings: Settings, account: Account, factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        other_key = {"Authorization": f"Bearer {create_api_key(s, s.get_one(User, account.user.id)).plaintext}"}
    other_user = make_account(factory, "bob@example.org")
    async with serving(settings, **LIMITED) as client:
        _assert_limited(await _exhaust(client, account.auth))
        _assert_limited(await client.get("/api/v1/me", headers=other_key))  # a new key of the same user gains nothing
        assert (await client.get("/api/v1/me", headers=other_user.auth)).status_code == 200
        assert_problem(await client.get("/api/v1/me", headers=BAD), 401)  # the user's limit is not the address's


async def _fail(client: httpx.AsyncClient, times: int, headers: dict[str, str] | None = None) -> list[int]:
    """The statuses of `times` requests with the unknown key (or `headers`)."""
    return [(await client.get("/api/v1/me", headers=BAD if headers is None else headers)).status_code
            for _ in range(times)]


async def test_an_address_sending_unknown_keys_is_429_past_its_burst_and_a_valid_key_still_works(
        settings: Settings, account: Account) -> None:
    async with serving(settings, **FAILURES) as client, serving(settings, address="127.0.0.2", **FAILURES) as other:
        assert await _fail(client, 2) == [401, 401]
        _assert_limited(await client.get("/api/v1/me", headers=BAD))
        _assert_limited(await client.get("/api/v1/me"))  # no key at all counts the same
        _assert_limited(await client.get("/api/v1/me", headers={"Cookie": "netsynth_session=made-up"}))
        _assert_limited(await client.post("/api/v1/session", json={"api_key": BAD["Authorization"][7:]}))
        assert (await client.get("/api/v1/me", headers=account.auth)).status_code == 200  # a key that works
        assert await _fail(other, 2) == [401, 401]  # another address has its own count


async def test_a_trusted_proxys_clients_are_counted_apart_and_others_cannot_choose_their_address(
        settings: Settings) -> None:
    proxy: dict[str, Any] = {"forwarded_allow_ips": "10.0.0.2", **FAILURES}
    async with serving(settings, address="10.0.0.2", **proxy) as via_proxy:
        for address in ("203.0.113.1", "203.0.113.2"):
            assert await _fail(via_proxy, 2, {**BAD, "X-Forwarded-For": address}) == [401, 401]
        _assert_limited(await via_proxy.get("/api/v1/me", headers={**BAD, "X-Forwarded-For": "203.0.113.1"}))
    async with serving(settings, address="10.0.0.3", **proxy) as direct:  # not the proxy: its header is ignored
        statuses = [(await direct.get("/api/v1/me", headers={**BAD, "X-Forwarded-For": f"203.0.113.{n}"}))
                    .status_code for n in range(3)]
        assert statuses == [401, 401, 429]


async def test_redis_counts_an_addresss_failures_for_every_api_process(settings: Settings, redis_url: str) -> None:
    """Two API processes on one Redis; the clients are in one IPv6 /64 network (a network no earlier run used), so
    they count as one address."""
    a, b = uuid.uuid4().int % 0x10000, uuid.uuid4().int % 0x10000
    network, next_network = f"2001:db8:{a:x}:{b:x}", f"2001:db8:{a:x}:{b ^ 1:x}"
    async with serving(settings, address=f"{network}::1", broker_url=redis_url, **FAILURES) as first, \
            serving(settings, address=f"{network}:ffff::9", broker_url=redis_url, **FAILURES) as second, \
            serving(settings, address=f"{next_network}::1", broker_url=redis_url, **FAILURES) as elsewhere:
        assert await _fail(first, 2) == [401, 401]
        _assert_limited(await second.get("/api/v1/me", headers=BAD))
        assert await _fail(elsewhere, 1) == [401]


async def test_redis_keeps_the_limit_for_every_api_process(settings: Settings, account: Account,
                                                           redis_url: str) -> None:
    async with serving(settings, broker_url=redis_url, **LIMITED) as first, \
            serving(settings, broker_url=redis_url, **LIMITED) as second:
        _assert_limited(await _exhaust(first, account.auth))
        _assert_limited(await second.get("/api/v1/me", headers=account.auth))  # another process, the same count


async def test_the_embedded_default_limits_each_process_by_itself(settings: Settings, account: Account) -> None:
    async with serving(settings, **LIMITED) as first, serving(settings, **LIMITED) as second:
        _assert_limited(await _exhaust(first, account.auth))
        assert (await second.get("/api/v1/me", headers=account.auth)).status_code == 200

