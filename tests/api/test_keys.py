"""`/me/keys`: list the caller's keys without secrets, create one whose secret is shown once, delete one (it answers
401 from the next request on)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from store.apikeys import create_api_key, hash_key
from store.db import session_scope
from store.models import ApiKey, User
from tests.api.conftest import Account, assert_problem

pytestmark = pytest.mark.anyio


async def test_a_created_key_is_shown_once_authenticates_and_is_listed_without_its_secret(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    r = await client.post("/api/v1/me/keys", json={"name": "laptop"}, headers=account.auth)
    assert r.status_code == 201, r.text
    created = r.json()
    secret = created["key"]
    assert secret.startswith(created["prefix"]) and created["prefix"].startswith("ns_")
    assert created["name"] == "laptop" and created["last_used_at"] is None
    with factory() as s:
        assert s.get(ApiKey, uuid.UUID(created["id"])).key_hash == hash_key(secret)  # type: ignore[union-attr]
    me = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    assert me.status_code == 200 and me.json()["email"] == "ada@example.org"
    listed = (await client.get("/api/v1/me/keys", headers=account.auth)).json()
    assert [k["name"] for k in listed] == ["", "laptop"]  # oldest first: the fixture's key has no name
    assert all(set(k) == {"id", "name", "prefix", "created_at", "last_used_at"} for k in listed)
    assert r.text.count(secret) == 1 and secret not in str(listed)
    assert listed[1]["last_used_at"] is not None  # the request above used it


async def test_a_deleted_key_answers_401_at_once_and_is_no_longer_listed(
    client: httpx.AsyncClient, account: Account
) -> None:
    created = (await client.post("/api/v1/me/keys", json={"name": "ci"}, headers=account.auth)).json()
    spare = {"Authorization": f"Bearer {created['key']}"}
    assert (await client.get("/api/v1/me", headers=spare)).status_code == 200
    r = await client.delete(f"/api/v1/me/keys/{created['id']}", headers=account.auth)
    assert r.status_code == 204 and r.content == b""
    assert_problem(await client.get("/api/v1/me", headers=spare), 401)
    assert [k["name"] for k in (await client.get("/api/v1/me/keys", headers=account.auth)).json()] == [""]
    assert_problem(await client.delete(f"/api/v1/me/keys/{created['id']}", headers=account.auth), 404)


async def test_a_key_may_delete_itself(client: httpx.AsyncClient, account: Account) -> None:
    own = (await client.get("/api/v1/me/keys", headers=account.auth)).json()[0]
    assert (await client.delete(f"/api/v1/me/keys/{own['id']}", headers=account.auth)).status_code == 204
    assert_problem(await client.get("/api/v1/me/keys", headers=account.auth), 401)


async def test_another_users_key_is_404_like_a_missing_one_and_keeps_working(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    with session_scope(factory) as s:
        bob = User(email="bob@example.org")
        s.add(bob)
        s.flush()
        issued = create_api_key(s, bob, name="bob's")
        bobs_id, bobs_key = issued.row.id, issued.plaintext
    for key_id in (bobs_id, uuid.uuid4()):
        body = assert_problem(await client.delete(f"/api/v1/me/keys/{key_id}", headers=account.auth), 404)
        assert body["detail"] == f"no API key {key_id}"
    listed = (await client.get("/api/v1/me/keys", headers=account.auth)).json()
    assert "bob's" not in [k["name"] for k in listed]
    assert (await client.get("/api/v1/me", headers={"Authorization": f"Bearer {bobs_key}"})).status_code == 200
    with factory() as s:
        assert s.scalars(select(ApiKey.revoked_at).where(ApiKey.id == bobs_id)).one() is None


@pytest.mark.parametrize("body", [{}, {"name": ""}, {"name": "x" * 201}, {"name": "a\x00b"},
                                  {"name": "x", "user_id": "y"}])
async def test_invalid_key_bodies_are_422_and_create_nothing(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], body: dict[str, str]
) -> None:
    assert_problem(await client.post("/api/v1/me/keys", json=body, headers=account.auth), 422)
    with factory() as s:
        assert len(s.scalars(select(ApiKey)).all()) == 1


@pytest.mark.parametrize(("method", "path"), [("GET", "/api/v1/me/keys"), ("POST", "/api/v1/me/keys"),
                                              ("DELETE", "/api/v1/me/keys/00000000-0000-4000-8000-000000000000")])
async def test_the_key_routes_need_a_key(client: httpx.AsyncClient, method: str, path: str) -> None:
    assert_problem(await client.request(method, path, json={"name": "x"}), 401)
