"""A live event stream lasts only as long as the credential it was opened with: signing out, revoking the key (the
stream's own, or the one its browser session was made from) or disabling the user closes it, without an `end` (the
job goes on), and the stream carries on meanwhile."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import cast

import anyio
import anyio.to_thread
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

import api.events
from infra.settings import Settings
from store.db import session_scope
from store.jobs import append_event, transition
from store.models import Job, JobState, User
from store.users import disable_user
from tests.api.conftest import Account
from tests.api.sse import sse_events
from tests.store.factories import make_job
from tests.workers.service import ApiServer

pytestmark = pytest.mark.anyio
End = Callable[[httpx.AsyncClient, dict[str, str]], Awaitable[None]]


def _running_job(factory: sessionmaker[Session], user: User) -> uuid.UUID:
    with session_scope(factory) as s:
        job = make_job(s, user)
        transition(job, JobState.RUNNING)
        append_event(s, job, "attempt", {"n": 0})
        return job.id


def _append(factory: sessionmaker[Session], job_id: uuid.UUID) -> None:
    with session_scope(factory) as s:
        append_event(s, s.get_one(Job, job_id), "progress", {"n": 1})


async def _revoke_the_key(client: httpx.AsyncClient, auth: dict[str, str]) -> None:
    """Delete the caller's only key through the API (with the stream's own credential)."""
    (key,) = (await client.get("/api/v1/me/keys", headers=auth)).json()
    assert (await client.delete(f"/api/v1/me/keys/{key['id']}", headers=auth)).status_code == 204


async def _sign_out(client: httpx.AsyncClient, auth: dict[str, str]) -> None:
    assert (await client.delete("/api/v1/session", headers=auth)).status_code == 204


def _disabling(factory: sessionmaker[Session], user_id: uuid.UUID) -> End:
    async def disable(_client: httpx.AsyncClient, _auth: dict[str, str]) -> None:
        def run() -> None:
            with session_scope(factory) as s:
                disable_user(s, s.get_one(User, user_id))
        await anyio.to_thread.run_sync(run)
    return disable


async def _cookie(client: httpx.AsyncClient, key: str) -> dict[str, str]:
    """Sign in with `key`: the headers of a cookie request that may change things (cookie and CSRF token)."""
    signed = await client.post("/api/v1/session", json={"api_key": key})
    assert signed.status_code == 200, signed.text
    token = signed.cookies["netsynth_session"]
    client.cookies.clear()
    return {"Cookie": f"netsynth_session={token}", "X-CSRF-Token": signed.json()["csrf_token"]}


@pytest.mark.parametrize(("signed_in_by", "ending"), [
    ("key", "revoke"), ("key", "disable"), ("cookie", "sign-out"), ("cookie", "revoke"), ("cookie", "disable"),
])
async def test_the_stream_ends_with_its_credential(settings: Settings, factory: sessionmaker[Session],
                                                   account: Account, monkeypatch: pytest.MonkeyPatch,
                                                   signed_in_by: str, ending: str) -> None:
    monkeypatch.setattr(api.events, "CREDENTIAL_SECONDS", 0.1)
    job_id = _running_job(factory, account.user)
    end: End = {"revoke": _revoke_the_key, "sign-out": _sign_out,
                "disable": _disabling(factory, account.user.id)}[ending]
    with ApiServer(settings) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            auth = account.auth if signed_in_by == "key" else await _cookie(client, account.key)
            with anyio.fail_after(60):  # a stream that outlived its credential would only ping until this
                async with client.stream("GET", f"/api/v1/jobs/{job_id}/events", headers=auth) as r:
                    assert r.status_code == 200
                    events = sse_events(r)
                    assert (await anext(events))["event"] == "attempt"
                    await anyio.sleep(0.5)  # several checks pass while the credential holds
                    await anyio.to_thread.run_sync(_append, factory, job_id)
                    assert (await anext(events))["event"] == "progress"  # the stream went on
                    await end(client, auth)
                    rest = [event async for event in events]  # until the server closes the stream
            again = await client.get(f"/api/v1/jobs/{job_id}/events", headers=auth)
    cast(FastAPI, server.server.config.app).state.engine.dispose()
    assert "end" not in [event["event"] for event in rest]  # the job did not end: the credential did
    assert again.status_code == 401
    with session_scope(factory) as s:
        assert s.get_one(Job, job_id).state is JobState.RUNNING
