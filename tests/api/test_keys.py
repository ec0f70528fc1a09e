"""`/me/keys`: list the caller's keys without secrets, create one whose secret is shown once (up to
NETSYNTH_MAX_API_KEYS that work, then 409), delete one (it answers 401 from the next request on)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

import store.apikeys
from api.app import create_app
from infra.settings import Settings
from store.apikeys import create_api_key, hash_key
from store.db import session_scope
from store.models import ApiKey, User
from tests.api.conftest import Account, assert_problem, at_once

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


def _keys(factory: sessionmaker[Session], account: Account) -> int:
    """How many keys of the account's user are stored, revoked ones included."""
    with factory() as s:
        return int(s.scalar(select(func.count()).select_from(ApiKey).where(ApiKey.user_id == account.user.id)) or 0)


async def test_past_the_most_keys_a_user_may_have_a_new_one_is_409_until_one_is_deleted(
    settings: Settings, account: Account, factory: sessionmaker[Session]
) -> None:
    app = create_app(settings.model_copy(update={"max_api_keys": 3}))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=account.auth) as client:
        made = [await client.post("/api/v1/me/keys", json={"name": f"k{n}"}) for n in range(2)]
        assert [r.status_code for r in made] == [201, 201]  # with the fixture's key: 3
        problem = assert_problem(await client.post("/api/v1/me/keys", json={"name": "one more"}), 409)
        assert problem["type"] == "urn:netsynth:problem:too-many-api-keys"
        assert "you have 3 API keys" in str(problem["detail"]) and "delete one" in str(problem["detail"])
        assert _keys(factory, account) == 3  # nothing written
        assert (await client.delete(f"/api/v1/me/keys/{made[0].json()['id']}")).status_code == 204
        assert (await client.post("/api/v1/me/keys", json={"name": "again"})).status_code == 201  # revoked: not counted
    app.state.engine.dispose()
    assert "409" in app.openapi()["paths"]["/api/v1/me/keys"]["post"]["responses"]


def test_concurrent_key_creations_cannot_pass_the_limit_together(
    settings: Settings, account: Account, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five creations at once with room for one more key: one is made, on SQLite as on PostgreSQL. Each waits a moment
    between its count and its insert, so without the count and insert serialised all five would pass."""
    issue = store.apikeys.create_api_key

    def wait_then_create(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)
        return issue(*args, **kwargs)

    monkeypatch.setattr(store.apikeys, "create_api_key", wait_then_create)
    statuses = at_once(settings.model_copy(update={"max_api_keys": 2}), account, 5, "/api/v1/me/keys", {"name": "k"})
    assert statuses == [201, 409, 409, 409, 409]
    assert _keys(factory, account) == 2
