"""`/session`: a browser signs in with an API key and gets an HttpOnly session cookie that authenticates like the key
(event streams included); a cookie request that changes anything needs the session's CSRF token; signing out, the
key's revocation, the user's disabling and the session's expiry all end it."""

from __future__ import annotations

from datetime import datetime, timedelta
from http.cookies import SimpleCookie

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from infra.settings import Settings
from store.apikeys import create_api_key, hash_key
from store.base import utcnow
from store.db import session_scope
from store.jobs import append_event, transition
from store.models import ApiKey, JobState, User, WebSession
from store.sessions import start_session
from store.users import disable_user
from tests.api.conftest import Account, assert_problem
from tests.store.factories import make_job

pytestmark = pytest.mark.anyio
COOKIE = "netsynth_session"


class SignedIn:
    """A session from `POST /session`: its cookie's token, the Set-Cookie attributes and the body."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.status_code == 200, response.text
        self.set_cookie = response.headers["set-cookie"]
        morsel = SimpleCookie(self.set_cookie)[COOKIE]
        self.token, self.attributes = morsel.value, morsel
        self.body = response.json()
        self.csrf = str(self.body["csrf_token"])

    @property
    def cookie(self) -> dict[str, str]:
        return {"Cookie": f"{COOKIE}={self.token}"}

    @property
    def unsafe(self) -> dict[str, str]:
        """The cookie and the CSRF token: what a change signed in with the cookie sends."""
        return {**self.cookie, "X-CSRF-Token": self.csrf}


async def sign_in(client: httpx.AsyncClient, key: str) -> SignedIn:
    signed = SignedIn(await client.post("/api/v1/session", json={"api_key": key}))
    client.cookies.clear()  # each request below says which cookie it sends
    return signed


async def test_sign_in_sets_an_httponly_strict_cookie_and_stores_only_its_hash(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    signed = await sign_in(client, account.key)
    attributes = [part.strip().lower() for part in signed.set_cookie.split(";")]
    assert {"httponly", "samesite=strict", "path=/", f"max-age={12 * 3600}"} <= set(attributes)
    assert "secure" not in attributes  # plain http: a Secure cookie would never come back
    assert signed.body["user"]["id"] == str(account.user.id)
    assert signed.body["user"]["email"] == "ada@example.org"
    expires = datetime.fromisoformat(signed.body["expires_at"])
    assert timedelta(hours=11, minutes=59) < expires - utcnow() <= timedelta(hours=12)
    with factory() as s:
        row = s.scalars(select(WebSession)).one()
        assert row.token_hash == hash_key(signed.token) != signed.token
        assert row.csrf_token == signed.csrf and row.user_id == account.user.id
        assert row.api_key_id == s.scalars(select(ApiKey.id)).one()


async def test_over_https_the_cookie_is_secure(app: FastAPI, account: Account) -> None:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="https://test") as c:
        signed = await sign_in(c, account.key)
    assert "secure" in [part.strip().lower() for part in signed.set_cookie.split(";")]


async def test_the_session_lasts_the_configured_hours(settings: Settings, account: Account) -> None:
    app = create_app(settings.model_copy(update={"session_hours": 0.5}))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        signed = await sign_in(c, account.key)
    app.state.engine.dispose()
    assert signed.attributes["max-age"] == "1800"


@pytest.mark.parametrize("key", ["ns_" + "x" * 43, "not-a-key", "ns_short"])
async def test_a_wrong_key_is_401_saying_it_was_not_accepted(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], key: str
) -> None:
    r = await client.post("/api/v1/session", json={"api_key": key})
    body = assert_problem(r, 401)
    assert "not accepted" in str(body["detail"])
    assert "set-cookie" not in r.headers
    with factory() as s:
        assert s.scalars(select(WebSession)).first() is None


async def test_a_disabled_users_key_signs_nobody_in(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    with session_scope(factory) as s:
        disable_user(s, s.get_one(User, account.user.id))
    body = assert_problem(await client.post("/api/v1/session", json={"api_key": account.key}), 401)
    assert "disabled" in str(body["detail"])


async def test_the_cookie_authenticates_reads_and_reads_its_session_back(
    client: httpx.AsyncClient, account: Account
) -> None:
    signed = await sign_in(client, account.key)
    me = await client.get("/api/v1/me", headers=signed.cookie)
    assert me.status_code == 200 and me.json()["id"] == str(account.user.id)
    again = await client.get("/api/v1/session", headers=signed.cookie)
    assert again.status_code == 200
    assert again.json() == signed.body  # a reloaded page gets its CSRF token back
    assert_problem(await client.get("/api/v1/session"), 401)
    assert_problem(await client.get("/api/v1/session", headers={"Cookie": f"{COOKIE}=forged"}), 401)
    assert_problem(await client.get("/api/v1/me", headers={"Cookie": f"{COOKIE}=forged"}), 401)


async def test_a_key_is_no_session(client: httpx.AsyncClient, account: Account) -> None:
    assert_problem(await client.get("/api/v1/session", headers=account.auth), 401)


async def test_the_cookie_authenticates_the_event_stream(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    with session_scope(factory) as s:
        job = make_job(s, account.user)
        transition(job, JobState.RUNNING)
        append_event(s, job, "progress", {"n": 1})
        transition(job, JobState.SUCCEEDED)
        job_id = job.id
    signed = await sign_in(client, account.key)
    async with client.stream("GET", f"/api/v1/jobs/{job_id}/events", headers=signed.cookie) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        text = (await r.aread()).decode()
    assert "event: progress" in text and "event: end" in text
    assert_problem(await client.get(f"/api/v1/jobs/{job_id}/events"), 401)


def _name(factory: sessionmaker[Session], account: Account) -> str:
    with factory() as s:
        return s.get_one(User, account.user.id).display_name


@pytest.mark.parametrize("csrf", [None, "", "wrong-token"])
async def test_a_cookie_change_without_its_csrf_token_is_403_and_changes_nothing(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], csrf: str | None
) -> None:
    signed = await sign_in(client, account.key)
    headers = signed.cookie if csrf is None else {**signed.cookie, "X-CSRF-Token": csrf}
    r = await client.patch("/api/v1/me", headers=headers, json={"display_name": "Mallory"})
    body = assert_problem(r, 403)
    assert body["type"] == "urn:netsynth:problem:csrf-rejected"
    assert "X-CSRF-Token" in str(body["detail"])
    assert _name(factory, account) == "Ada"
    assert_problem(await client.post("/api/v1/me/keys", headers=headers, json={"name": "stolen"}), 403)
    with factory() as s:
        assert len(s.scalars(select(ApiKey)).all()) == 1
    assert_problem(await client.delete("/api/v1/session", headers=headers), 403)
    assert (await client.get("/api/v1/session", headers=signed.cookie)).status_code == 200  # still signed in


async def test_a_cookie_change_with_its_csrf_token_succeeds(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    signed = await sign_in(client, account.key)
    r = await client.patch("/api/v1/me", headers=signed.unsafe, json={"display_name": "Ada L."})
    assert r.status_code == 200, r.text
    assert _name(factory, account) == "Ada L."
    assert (await client.post("/api/v1/me/keys", headers=signed.unsafe, json={"name": "laptop"})).status_code == 201


async def test_another_sessions_csrf_token_is_refused(client: httpx.AsyncClient, account: Account) -> None:
    first, second = await sign_in(client, account.key), await sign_in(client, account.key)
    assert first.token != second.token and first.csrf != second.csrf
    headers = {**first.cookie, "X-CSRF-Token": second.csrf}
    assert_problem(await client.patch("/api/v1/me", headers=headers, json={"display_name": "Eve"}), 403)


async def test_a_key_needs_no_csrf_token_even_beside_a_cookie(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    signed = await sign_in(client, account.key)
    r = await client.patch("/api/v1/me", headers={**account.auth, **signed.cookie}, json={"display_name": "Ada B."})
    assert r.status_code == 200, r.text
    assert _name(factory, account) == "Ada B."


async def test_sign_out_ends_the_session_and_clears_the_cookie(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    signed = await sign_in(client, account.key)
    r = await client.delete("/api/v1/session", headers=signed.unsafe)
    assert r.status_code == 204
    cleared = SimpleCookie(r.headers["set-cookie"])[COOKIE]
    assert (cleared.value, cleared["max-age"], cleared["path"]) == ("", "0", "/")
    assert_problem(await client.get("/api/v1/me", headers=signed.cookie), 401)
    assert_problem(await client.get("/api/v1/session", headers=signed.cookie), 401)
    with factory() as s:
        assert s.scalars(select(WebSession)).first() is None
    assert (await client.get("/api/v1/me", headers=account.auth)).status_code == 200  # the key itself still works


async def test_revoking_the_key_ends_its_sessions_only(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    with session_scope(factory) as s:
        other = create_api_key(s, s.get_one(User, account.user.id), name="other").plaintext
    doomed, kept = await sign_in(client, account.key), await sign_in(client, other)
    assert (await client.get("/api/v1/me", headers=doomed.cookie)).status_code == 200
    with factory() as s:
        key_id = s.scalars(select(ApiKey.id).where(ApiKey.key_hash == hash_key(account.key))).one()
    assert (await client.delete(f"/api/v1/me/keys/{key_id}", headers=kept.unsafe)).status_code == 204
    assert_problem(await client.get("/api/v1/me", headers=doomed.cookie), 401)
    assert (await client.get("/api/v1/me", headers=kept.cookie)).status_code == 200


async def test_disabling_the_user_ends_the_session(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    signed = await sign_in(client, account.key)
    with session_scope(factory) as s:
        disable_user(s, s.get_one(User, account.user.id))
    assert_problem(await client.get("/api/v1/me", headers=signed.cookie), 401)


async def test_an_expired_session_is_401(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    with session_scope(factory) as s:
        key = s.scalars(select(ApiKey)).one()
        started = utcnow() - timedelta(hours=2)
        expired = start_session(s, key, timedelta(hours=1), now=started).token
        live = start_session(s, key, timedelta(hours=3), now=started).token
    assert_problem(await client.get("/api/v1/me", headers={"Cookie": f"{COOKIE}={expired}"}), 401)
    assert (await client.get("/api/v1/me", headers={"Cookie": f"{COOKIE}={live}"})).status_code == 200
    await sign_in(client, account.key)  # a sign-in sweeps the expired sessions away
    with factory() as s:
        assert hash_key(expired) not in set(s.scalars(select(WebSession.token_hash)))


async def test_cookie_and_key_requests_share_the_users_rate_limit(settings: Settings, account: Account) -> None:
    app = create_app(settings.model_copy(update={"rate_limit_per_minute": 60, "rate_limit_burst": 3}))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        signed = await sign_in(c, account.key)  # the sign-in is the key's first request
        assert (await c.get("/api/v1/me", headers=signed.cookie)).status_code == 200
        assert (await c.get("/api/v1/me", headers=account.auth)).status_code == 200
        body = assert_problem(await c.get("/api/v1/session", headers=signed.cookie), 429)
    app.state.engine.dispose()
    assert body["type"] == "urn:netsynth:problem:rate-limited"


async def test_the_openapi_document_names_the_cookie_and_the_csrf_refusal(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/api/v1/openapi.json")).json()
    cookie = spec["components"]["securitySchemes"]["APIKeyCookie"]
    assert (cookie["type"], cookie["in"], cookie["name"]) == ("apiKey", "cookie", COOKIE)
    me = spec["paths"]["/api/v1/me"]
    assert {"HTTPBearer": []} in me["get"]["security"] and {"APIKeyCookie": []} in me["get"]["security"]
    assert "403" in me["patch"]["responses"] and "403" not in me["get"]["responses"]
    session = spec["paths"]["/api/v1/session"]
    assert set(session) == {"get", "post", "delete"}
    assert "403" in session["delete"]["responses"] and "401" in session["post"]["responses"]
    assert session["post"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/SessionOut")

