"""`GET /jobs/{id}/events`: the event log as Server-Sent Events (resumable, ending with `end`) or as JSON."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import Message, Receive, Scope, Send

import api.events
from api.events import prefers_json
from store.db import session_scope
from store.jobs import append_event, transition
from store.models import Job, JobState
from tests.api.conftest import Account, assert_problem
from tests.store.factories import make_job

pytestmark = pytest.mark.anyio


def _sse(text: str) -> list[dict[str, Any]]:
    """The events of an SSE body: each a dict of its `id`, `event` and parsed `data` fields (comments skipped)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = json.loads(value) if name == "data" else value
        if fields:
            events.append(fields)
    return events


def _job_with_events(factory: sessionmaker[Session], account: Account, kinds: list[str],
                     end: JobState | None = JobState.SUCCEEDED) -> tuple[uuid.UUID, list[int]]:
    """A running job of the account with one event per kind (payload {"n": i}), then moved to `end` if given."""
    with session_scope(factory) as s:
        job = make_job(s, account.user)
        transition(job, JobState.RUNNING)
        seqs = [append_event(s, job, kind, {"n": i}).seq for i, kind in enumerate(kinds)]
        if end is not None:
            transition(job, end)
        return job.id, seqs


async def _stream(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    async with client.stream("GET", url, headers=headers) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-store"
        return _sse((await r.aread()).decode())


async def test_stream_sends_every_event_in_order_then_end(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    job_id, seqs = _job_with_events(factory, account, ["attempt", "progress", "progress"])
    events = await _stream(client, f"/api/v1/jobs/{job_id}/events", account.auth)
    assert [e.get("id") for e in events] == [*map(str, seqs), None]
    assert [e["event"] for e in events] == ["attempt", "progress", "progress", "end"]
    for i, (event, seq) in enumerate(zip(events, seqs, strict=False)):
        assert event["data"]["seq"] == seq
        assert (event["data"]["kind"], event["data"]["payload"]) == (event["event"], {"n": i})
        assert datetime.fromisoformat(event["data"]["at"]).tzinfo is not None  # ISO 8601, with its offset
    assert events[-1]["data"] == {"state": "succeeded"}


async def test_last_event_id_and_after_resume_past_earlier_events(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    job_id, seqs = _job_with_events(factory, account, ["a", "b", "c", "d"], end=JobState.CANCELLED)
    url = f"/api/v1/jobs/{job_id}/events"
    resumed = await _stream(client, url, account.auth | {"Last-Event-ID": str(seqs[1])})
    assert [e["event"] for e in resumed] == ["c", "d", "end"]
    assert [e["event"] for e in await _stream(client, f"{url}?after={seqs[2]}", account.auth)] == ["d", "end"]
    done = await _stream(client, url, account.auth | {"Last-Event-ID": str(seqs[-1])})
    assert done == [{"event": "end", "data": {"state": "cancelled"}}]


class _FirstChunk:
    """ASGI wrapper that signals (thread-safely) when the response sent its first non-empty body chunk."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.sent = threading.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def spy(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and message.get("body"):
                self.sent.set()

        await self.app(scope, receive, spy)


@contextmanager
def _once(signal: threading.Event, change: Callable[[], None]) -> Iterator[None]:
    """Run `change` on a thread as soon as `signal` is set, while the block runs."""
    def run() -> None:
        if signal.wait(timeout=30):
            change()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    thread.join(timeout=30)


async def _stream_while(app: FastAPI, account: Account, change: Callable[[Session, Job], None]) -> list[dict[str, Any]]:
    """Stream a running job's events (one `attempt`), applying `change` to the job from a thread once it went out."""
    factory: sessionmaker[Session] = app.state.session_factory
    job_id, _ = _job_with_events(factory, account, ["attempt"], end=None)

    def apply() -> None:
        with session_scope(factory) as s:
            job = s.get(Job, job_id)
            assert job is not None
            change(s, job)

    watched = _FirstChunk(app)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=watched), base_url="http://test") as client:
        with _once(watched.sent, apply), anyio.fail_after(30):
            return await _stream(client, f"/api/v1/jobs/{job_id}/events", account.auth)


async def test_stream_follows_a_job_that_ends_while_streaming(app: FastAPI, account: Account) -> None:
    def finish(s: Session, job: Job) -> None:
        append_event(s, job, "progress", {"n": 1})
        transition(job, JobState.FAILED, error="boom")
        append_event(s, job, "failed", {"n": 2})

    events = await _stream_while(app, account, finish)
    assert [e["event"] for e in events] == ["attempt", "progress", "failed", "end"]
    assert [e["data"]["payload"]["n"] for e in events[:-1]] == [0, 1, 2]
    assert events[-1]["data"] == {"state": "failed"}


async def test_stream_ends_when_the_job_is_deleted(app: FastAPI, account: Account) -> None:
    def drop(s: Session, job: Job) -> None:
        s.execute(delete(Job).where(Job.id == job.id))

    events = await _stream_while(app, account, drop)
    assert [(e["event"], e["data"].get("state", "-")) for e in events] == [("attempt", "-"), ("end", None)]


async def test_an_idle_stream_pings_and_stops_when_the_client_disconnects(
    app: FastAPI, account: Account, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api.events, "PING_SECONDS", 0.05)
    job_id, _ = _job_with_events(factory, account, ["attempt"], end=None)
    chunks: list[bytes] = []
    pinged = anyio.Event()
    requested = False

    async def receive() -> Message:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await pinged.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if chunks[-1].startswith(b": ping"):
                pinged.set()

    headers = [(k.lower().encode(), v.encode()) for k, v in account.auth.items()]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": f"/api/v1/jobs/{job_id}/events", "raw_path": b"", "query_string": b"", "root_path": "",
             "headers": headers, "server": ("test", 80), "client": ("127.0.0.1", 1)}
    with anyio.fail_after(30):  # a stream that ignored the disconnect would hang here
        await app(scope, receive, send)
    assert [e["event"] for e in _sse(b"".join(chunks).decode())] == ["attempt"]
    assert pinged.is_set()


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream;q=0.5, application/json",
                                    "application/*", "application/json, */*;q=0.1"])
async def test_json_variant_lists_the_events_so_far(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], accept: str
) -> None:
    job_id, seqs = _job_with_events(factory, account, ["attempt", "progress"], end=None)
    r = await client.get(f"/api/v1/jobs/{job_id}/events", headers=account.auth | {"Accept": accept})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert [(e["seq"], e["kind"], e["payload"]) for e in body] == [(seqs[0], "attempt", {"n": 0}),
                                                                   (seqs[1], "progress", {"n": 1})]
    assert all(e["at"] for e in body)
    r = await client.get(f"/api/v1/jobs/{job_id}/events", params={"after": seqs[0]},
                         headers=account.auth | {"Accept": accept})
    assert [e["seq"] for e in r.json()] == [seqs[1]]


@pytest.mark.parametrize(("accept", "json_wanted"), [
    (None, False), ("", False), ("*/*", False), ("text/event-stream", False), ("application/json", True),
    ("application/json, text/event-stream", False), ("text/event-stream;q=0.9, application/json", True),
    ("application/json;q=0.4, text/*;q=0.5", False), ("application/json;q=bad", False),
    ("application/json;q=2, text/event-stream;q=0.1", False), ("text/html, application/json", True),
    ("APPLICATION/JSON", True), ("application/json;q=0, */*", False), ("*/*;q=0.1, application/json", True),
])
def test_accept_header_negotiation(accept: str | None, json_wanted: bool) -> None:
    assert prefers_json(accept) is json_wanted


async def test_others_and_missing_jobs_are_404_in_both_forms(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    with session_scope(factory) as s:
        theirs = make_job(s).id
    for job_id in (theirs, uuid.uuid4()):
        for accept in ("text/event-stream", "application/json"):
            r = await client.get(f"/api/v1/jobs/{job_id}/events", headers=account.auth | {"Accept": accept})
            assert assert_problem(r, 404)["detail"] == f"no job {job_id}"


@pytest.mark.parametrize(("params", "headers"), [
    ({"after": -1}, {}), ({"after": "x"}, {}), ({"after": 2**40}, {}),
    ({}, {"Last-Event-ID": "abc"}), ({}, {"Last-Event-ID": "-3"}),
])
async def test_bad_resume_positions_are_422(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session],
    params: dict[str, Any], headers: dict[str, str]
) -> None:
    job_id, _ = _job_with_events(factory, account, ["attempt"])
    r = await client.get(f"/api/v1/jobs/{job_id}/events", params=params, headers=account.auth | headers)
    assert_problem(r, 422)
