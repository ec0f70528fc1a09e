"""Authentication: every route but health needs `Authorization: Bearer <api key>`; failures are 401 problems."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from store.apikeys import revoke_api_key
from store.db import session_scope
from store.models import ApiKey, User
from store.users import disable_user
from tests.api.conftest import Account, assert_problem

pytestmark = pytest.mark.anyio


async def test_me_returns_the_keys_owner_and_records_its_use(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    r = await client.get("/api/v1/me", headers=account.auth)
    assert r.status_code == 200
    body = r.json()
    assert body["id"] == str(account.user.id)
    assert body["email"] == "ada@example.org"
    assert body["display_name"] == "Ada"
    assert body["created_at"].startswith(str(account.user.created_at.year))
    with factory() as s:
        assert s.scalars(select(ApiKey)).one().last_used_at is not None


async def test_missing_key_is_401_with_bearer_challenge(client: httpx.AsyncClient) -> None:
    r = await client.get("/api/v1/me")
    body = assert_problem(r, 401)
    assert r.headers["www-authenticate"] == "Bearer"
    assert body["type"] == "urn:netsynth:problem:unauthenticated"


@pytest.mark.parametrize("header", ["Basic YWRhOnB3", "Bearer", "ns_no-scheme-at-all"])
async def test_other_schemes_and_malformed_headers_are_401(client: httpx.AsyncClient, header: str) -> None:
    r = await client.get("/api/v1/me", headers={"Authorization": header})
    assert_problem(r, 401)
    assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("bad", ["ns_short", "ns_" + "x" * 43, "not-a-key-at-all"])
async def test_unknown_keys_are_401_invalid_token(client: httpx.AsyncClient, account: Account, bad: str) -> None:
    r = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {bad}"})
    assert_problem(r, 401)
    assert r.headers["www-authenticate"] == 'Bearer error="invalid_token"'


async def test_tampered_key_is_401(client: httpx.AsyncClient, account: Account) -> None:
    tampered = account.key[:-1] + ("A" if account.key[-1] != "A" else "B")
    assert_problem(await client.get("/api/v1/me", headers={"Authorization": f"Bearer {tampered}"}), 401)


async def test_revoked_key_is_401(client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]) -> None:
    assert (await client.get("/api/v1/me", headers=account.auth)).status_code == 200
    with session_scope(factory) as s:
        revoke_api_key(s.scalars(select(ApiKey)).one())
    r = await client.get("/api/v1/me", headers=account.auth)
    assert_problem(r, 401)
    assert r.headers["www-authenticate"] == 'Bearer error="invalid_token"'


async def test_auth_is_checked_before_the_body(client: httpx.AsyncClient) -> None:
    assert_problem(await client.patch("/api/v1/me", content=b"{not json"), 401)


async def test_patch_me_changes_the_display_name(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    r = await client.patch("/api/v1/me", headers=account.auth, json={"display_name": "Ada L."})
    assert r.status_code == 200
    assert r.json()["display_name"] == "Ada L."
    with factory() as s:
        user = s.get(User, account.user.id)
        assert user is not None and user.display_name == "Ada L."
    assert uuid.UUID(r.json()["id"]) == account.user.id


@pytest.mark.parametrize(
    ("content", "error_type"),
    [
        (b"{not json", "json_invalid"),
        (b'{"display_name": 42}', "string_type"),
        (b'{"display_name": ""}', "string_too_short"),
        (b'{"display_name": "x", "admin": true}', "extra_forbidden"),
        (b"{}", "missing"),
        (b"[1, 2]", "model_attributes_type"),
        (b"", "missing"),
    ],
)
async def test_bad_bodies_are_422_problems_not_500s(
    client: httpx.AsyncClient, account: Account, content: bytes, error_type: str
) -> None:
    headers = {**account.auth, "Content-Type": "application/json"}
    r = await client.patch("/api/v1/me", headers=headers, content=content)
    body = assert_problem(r, 422)
    assert body["type"] == "urn:netsynth:problem:validation-error"
    errors = body["errors"]
    assert isinstance(errors, list) and errors
    assert error_type in {e["type"] for e in errors}
    assert all(set(e) == {"loc", "msg", "type"} for e in errors)  # never echoes the rejected input


async def test_a_disabled_users_key_is_401_at_once(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    assert (await client.get("/api/v1/me", headers=account.auth)).status_code == 200
    with session_scope(factory) as s:
        disable_user(s, s.get_one(User, account.user.id))
    r = await client.get("/api/v1/me", headers=account.auth)
    body = assert_problem(r, 401)
    assert r.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert "disabled" in str(body["detail"])


async def test_requests_within_a_minute_record_the_first_use_only(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    times = []
    for _ in range(3):
        assert (await client.get("/api/v1/me", headers=account.auth)).status_code == 200
        with factory() as s:
            times.append(s.scalars(select(ApiKey.last_used_at)).one())
    assert times[0] is not None and times == [times[0]] * 3
