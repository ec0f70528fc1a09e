"""`GET /jobs/{id}`, the status poll, checks its caller in the same worker thread as its read (`api.routes.jobs`),
with one statement for the key and its user (`store.apikeys.find_api_key`): it answers exactly what the job list
answers, and a revoked key, a disabled user, an ended session, a rate past its limit or another user's job are
refused from the very next poll, by API key and by session cookie alike."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from infra.ratelimit import make_limits
from infra.settings import Settings
from store.apikeys import find_api_key
from store.base import utcnow
from store.db import session_scope
from store.jobs import transition
from store.models import JobState, TrainedModel, User, WebSession
from store.sessions import find_session, start_session
from store.users import disable_user
from tests.api.conftest import Account, assert_problem, make_account, round_trips
from tests.store.factories import make_job

pytestmark = pytest.mark.anyio
Auth = Callable[[httpx.AsyncClient, Account], Awaitable[dict[str, str]]]


async def _by_key(_client: httpx.AsyncClient, account: Account) -> dict[str, str]:
    return account.auth


async def _by_cookie(client: httpx.AsyncClient, account: Account) -> dict[str, str]:
    signed = await client.post("/api/v1/session", json={"api_key": account.key})
    assert signed.status_code == 200, signed.text
    token = signed.cookies["netsynth_session"]
    client.cookies.clear()
    return {"Cookie": f"netsynth_session={token}", "X-CSRF-Token": signed.json()["csrf_token"]}


AUTHS = {"key": _by_key, "cookie": _by_cookie}


def _job_with_models(factory: sessionmaker[Session], user: User) -> uuid.UUID:
    with session_scope(factory) as s:
        job = make_job(s, user)
        transition(job, JobState.RUNNING)
        transition(job, JobState.SUCCEEDED)
        s.add_all(TrainedModel(job_id=job.id, spec={}, variant=variant, weights=b"w", onnx=b"o", param_count=10,
                               weights_bytes=40) for variant in ("compressed", "dense"))
        return job.id


@pytest.mark.parametrize("by", list(AUTHS))
async def test_the_poll_answers_what_the_list_answers(client: httpx.AsyncClient, account: Account,
                                                      factory: sessionmaker[Session], by: str) -> None:
    job_id = _job_with_models(factory, account.user)
    auth = await AUTHS[by](client, account)
    polled = await client.get(f"/api/v1/jobs/{job_id}", headers=auth)
    assert polled.status_code == 200, polled.text
    assert polled.headers["content-type"] == "application/json"
    (listed,) = (await client.get("/api/v1/jobs", headers=auth)).json()
    assert polled.json() == listed
    assert [m["variant"] for m in listed["models"]] == ["dense", "compressed"]


async def test_a_job_with_no_model_and_another_users_job(client: httpx.AsyncClient, account: Account,
                                                         factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        mine = make_job(s, account.user).id
    theirs = _job_with_models(factory, make_account(factory, "eve@example.org").user)
    polled = await client.get(f"/api/v1/jobs/{mine}", headers=account.auth)
    assert polled.status_code == 200 and polled.json()["models"] == [] and polled.json()["model_ids"] == []
    for missing in (theirs, uuid.uuid4()):
        assert_problem(await client.get(f"/api/v1/jobs/{missing}", headers=account.auth), 404)


async def test_a_poll_on_postgresql_takes_two_round_trips(client: httpx.AsyncClient, account: Account,
                                                          factory: sessionmaker[Session]) -> None:
    """The key's check and the job's read, and nothing else: no BEGIN and no COMMIT (`store.db.read_scope`). (Nor a
    pre-ping at checkout: tests.store.test_db.)"""
    engine = factory.kw["bind"]
    if engine.dialect.name != "postgresql":
        pytest.skip("round trips to PostgreSQL")
    job_id = _job_with_models(factory, account.user)
    assert (await client.get(f"/api/v1/jobs/{job_id}", headers=account.auth)).status_code == 200  # records the use
    with round_trips(engine) as trips:
        assert (await client.get(f"/api/v1/jobs/{job_id}", headers=account.auth)).status_code == 200
    assert trips == ["Sync", "Sync"], trips  # the two SELECTs' (extended queries); a ping, BEGIN or COMMIT: Query


def _revoke(factory: sessionmaker[Session], account: Account) -> None:
    with session_scope(factory) as s:
        for key in s.get_one(User, account.user.id).api_keys:
            key.revoked_at = utcnow()


def _disable(factory: sessionmaker[Session], account: Account) -> None:
    with session_scope(factory) as s:
        disable_user(s, s.get_one(User, account.user.id))


def _expire_sessions(factory: sessionmaker[Session], _account: Account) -> None:
    with session_scope(factory) as s:
        for row in s.query(WebSession):
            row.expires_at = utcnow() - timedelta(seconds=1)


@pytest.mark.parametrize(("by", "end"), [
    ("key", _revoke), ("key", _disable), ("cookie", _revoke), ("cookie", _disable), ("cookie", _expire_sessions),
])
async def test_the_next_poll_after_revocation_is_refused(client: httpx.AsyncClient, account: Account,
                                                         factory: sessionmaker[Session], by: str,
                                                         end: Callable[[sessionmaker[Session], Account], None]) -> None:
    job_id = _job_with_models(factory, account.user)
    auth = await AUTHS[by](client, account)
    assert (await client.get(f"/api/v1/jobs/{job_id}", headers=auth)).status_code == 200
    end(factory, account)
    assert_problem(await client.get(f"/api/v1/jobs/{job_id}", headers=auth), 401)


async def test_the_next_poll_after_signing_out_is_refused(client: httpx.AsyncClient, account: Account,
                                                          factory: sessionmaker[Session]) -> None:
    job_id = _job_with_models(factory, account.user)
    auth = await _by_cookie(client, account)
    assert (await client.get(f"/api/v1/jobs/{job_id}", headers=auth)).status_code == 200
    assert (await client.delete("/api/v1/session", headers=auth)).status_code == 204
    assert_problem(await client.get(f"/api/v1/jobs/{job_id}", headers=auth), 401)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer ns_not-a-key-at-all-0123456789"},
                                     {"Cookie": "netsynth_session=forged"}])
async def test_a_poll_without_a_valid_credential_is_401(client: httpx.AsyncClient, account: Account,
                                                        factory: sessionmaker[Session],
                                                        headers: dict[str, str]) -> None:
    job_id = _job_with_models(factory, account.user)
    assert_problem(await client.get(f"/api/v1/jobs/{job_id}", headers=headers), 401)


async def test_polls_count_against_the_rate_limit(settings: Settings, account: Account,
                                                  factory: sessionmaker[Session]) -> None:
    job_id = _job_with_models(factory, account.user)
    app = create_app(settings.model_copy(update={"rate_limit_per_minute": 60, "rate_limit_burst": 2}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                 base_url="http://test") as client:
        answers = [await client.get(f"/api/v1/jobs/{job_id}", headers=account.auth) for _ in range(3)]
    app.state.engine.dispose()
    assert [a.status_code for a in answers[:2]] == [200, 200]
    assert assert_problem(answers[2], 429)["type"] == "urn:netsynth:problem:rate-limited"
    assert "retry-after" in answers[2].headers


def _cases(factory: sessionmaker[Session]) -> tuple[list[str], list[str]]:
    """Keys and session tokens in every state that matters: working, revoked, of a disabled user, expired, wrong,
    unknown, malformed."""
    keys, tokens = [], []
    for name in ("ok", "revoked", "disabled", "expired"):
        account = make_account(factory, f"{name}@example.org")
        with session_scope(factory) as s:
            key = find_api_key(s, account.key)
            assert key is not None
            lifetime = timedelta(seconds=-1 if name == "expired" else 60)
            tokens.append(start_session(s, key, lifetime).token)
        if name == "revoked":
            _revoke(factory, account)
        elif name == "disabled":
            _disable(factory, account)
        keys += [account.key, account.key[:-1] + ("A" if account.key[-1] != "A" else "B")]
    return [*keys, "ns_" + "x" * 43, "ns_short", "not-a-key", ""], [*tokens, "unknown-token", ""]


def test_the_key_and_session_lookups_find_only_live_credentials_each_in_one_statement(
        factory: sessionmaker[Session]) -> None:
    """`store.apikeys.find_api_key` and `store.sessions.find_session`, which every authenticated request runs: the
    working user's key and the key of the user whose session expired; the working session; each with its user loaded
    by the one statement that found it."""
    keys, tokens = _cases(factory)
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    with factory() as s:
        assert [key for key in keys if find_api_key(s, key) is not None] == [keys[0], keys[6]]
        assert [t for t in tokens if find_session(s, t) is not None] == tokens[:1]
        s.rollback()
        event.listen(s.get_bind(), "before_cursor_execute", count)
        try:
            key = find_api_key(s, keys[0])
            assert key is not None and key.user.disabled_at is None
            web = find_session(s, tokens[0])
            assert web is not None and web.api_key.user.disabled_at is None
        finally:
            event.remove(s.get_bind(), "before_cursor_execute", count)
        assert len(statements) == 2, statements


def test_spaced_requests_start_no_thread_in_the_memory_rate_limiter(monkeypatch: pytest.MonkeyPatch) -> None:
    """`limits`' MemoryStorage started a timer thread at every hit more than 10 ms after the last (a poller's): the
    limiter the API makes drops old entries inline instead, and still limits."""
    limiter = make_limits(Settings(broker_url="filesystem://./var/broker", rate_limit_per_minute=60,
                                   rate_limit_burst=3)).users
    started: list[threading.Thread] = []
    start = threading.Thread.start

    def noted(thread: threading.Thread) -> None:
        started.append(thread)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", noted)
    answers = []
    for _ in range(4):
        answers.append(limiter.hit("spaced"))
        time.sleep(0.02)  # past the parent's 10 ms timer
    assert started == []
    assert answers[:3] == [None, None, None] and answers[3] is not None  # the fourth in the window is refused
