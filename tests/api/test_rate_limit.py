"""Rate limits per API key: past its burst a key's requests are 429 problems with `Retry-After`, in memory on the
filesystem broker and in Redis (shared by every API process) on the Redis broker; health is never limited."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from infra.settings import Settings
from store.apikeys import create_api_key
from store.db import session_scope
from store.models import User
from tests.api.conftest import Account, assert_problem
from tests.workers.conftest import redis_url

__all__ = ["redis_url"]  # the workers' test Redis fixture (skips when Redis does not answer)

pytestmark = pytest.mark.anyio
LIMITED = {"rate_limit_per_minute": 60, "rate_limit_burst": 2}
"""2 requests at once, then one a second: a window of 2 requests per 2 s."""


@asynccontextmanager
async def serving(settings: Settings, **changes: object) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app on `settings` with `changes`."""
    app = create_app(settings.model_copy(update=changes))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
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


async def test_each_key_has_its_own_limit_and_bad_keys_stay_401(settings: Settings, account: Account,
                                                               factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        other = {"Authorization": f"Bearer {create_api_key(s, s.get_one(User, account.user.id)).plaintext}"}
    async with serving(settings, **LIMITED) as client:
        _assert_limited(await _exhaust(client, account.auth))
        assert (await client.get("/api/v1/me", headers=other)).status_code == 200  # the same user's other key
        bad = {"Authorization": "Bearer ns_" + "x" * 43}
        assert_problem(await client.get("/api/v1/me", headers=bad), 401)


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

