"""Event streams fan out: the watchers of one job share one reader per API process, woken by notifications."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

import api.fanout
from infra.settings import Settings
from store.db import make_engine, session_scope
from store.jobs import append_event, transition
from store.models import Job, JobState
from store.notify import Listener, subscribe
from tests.api.conftest import Account, round_trips
from tests.api.sse import sse_events
from tests.store.factories import make_job
from tests.workers.service import ApiServer, wait_for

pytestmark = pytest.mark.anyio
LATER = 3  # events appended while the watchers stream, before the final one


def _running_job(factory: sessionmaker[Session], account: Account) -> uuid.UUID:
    with session_scope(factory) as s:
        job = make_job(s, account.user)
        transition(job, JobState.RUNNING)
        append_event(s, job, "attempt", {"n": 0})
        return job.id


def _append_then_finish(factory: sessionmaker[Session], job_id: uuid.UUID) -> None:
    """LATER events in transactions of their own, then the job succeeds with a last event."""
    for n in range(1, LATER + 1):
        with session_scope(factory) as s:
            append_event(s, s.get_one(Job, job_id), "progress", {"n": n})
    with session_scope(factory) as s:
        job = s.get_one(Job, job_id)
        transition(job, JobState.SUCCEEDED)
        append_event(s, job, "succeeded", {"n": LATER + 1})


def test_a_feed_read_on_postgresql_takes_two_round_trips(factory: sessionmaker[Session], account: Account) -> None:
    """The job's state and its new events, and no BEGIN or ROLLBACK around them (`store.db.read_scope`)."""
    engine = factory.kw["bind"]
    if engine.dialect.name != "postgresql":
        pytest.skip("round trips to PostgreSQL")
    job_id = _running_job(factory, account)
    with round_trips(engine) as trips:
        poll = api.fanout.read_poll(factory, job_id, 0)
    assert poll.state is JobState.RUNNING and [e.kind for e in poll.events] == ["attempt"]
    assert trips == ["Sync", "Sync"], trips


@pytest.mark.parametrize("watchers", [1, 10])
async def test_the_watchers_of_a_job_cost_the_queries_of_one(
    settings: Settings, account: Account, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch, watchers: int
) -> None:
    monkeypatch.setattr(api.fanout, "POLL_SECONDS", 3600.0)  # only notifications wake the feed
    monkeypatch.setattr(api.fanout, "NOTIFIED_POLL_SECONDS", 3600.0)
    job_id = _running_job(factory, account)
    url = f"/api/v1/jobs/{job_id}/events"
    got: list[list[dict[str, Any]]] = [[] for _ in range(watchers)]
    started = [anyio.Event() for _ in range(watchers)]
    with ApiServer(settings) as server:
        statements: list[str] = []
        app = server.server.config.app
        assert isinstance(app, FastAPI)
        event.listen(app.state.engine, "before_cursor_execute",
                     lambda _conn, _cursor, sql, *_rest: statements.append(sql))
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:

            async def watch(i: int) -> None:
                async with client.stream("GET", url, headers=account.auth) as r:
                    assert r.status_code == 200
                    async for item in sse_events(r):
                        got[i].append(item)
                        started[i].set()

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i in range(watchers):
                        tg.start_soon(watch, i)
                    for ready in started:
                        await ready.wait()
                    before = len(statements)
                    await anyio.to_thread.run_sync(_append_then_finish, factory, job_id)
            used = statements[before:]
            async with client.stream("GET", url, headers=account.auth | {"Last-Event-ID": got[0][2]["id"]}) as r:
                resumed = [e async for e in sse_events(r)]
    kinds = ["attempt", *["progress"] * LATER, "succeeded", "end"]
    for events in got:
        assert [e["event"] for e in events] == kinds
        assert [e["data"].get("payload", {}).get("n") for e in events[:-1]] == list(range(LATER + 2))
        assert events[-1]["data"] == {"state": "succeeded"}
    assert [e["event"] for e in resumed] == kinds[3:]
    # the feed reads the job and its new events (2 statements) once per commit, plus once when its PostgreSQL
    # listener connects; a reader per watcher would cost `watchers` times that
    assert len(used) <= 2 * (LATER + 2), used


async def test_local_notices_come_after_commit_and_never_after_rollback(
    account: Account, factory: sessionmaker[Session]
) -> None:
    heard: list[uuid.UUID | None] = []
    if factory.kw["bind"].dialect.name == "postgresql":
        listener = Listener(factory.kw["bind"], heard.append, poll_s=0.05).start()
        stop = listener.stop
        wait_for(lambda: listener.listening, 30, "the listener")
        wait_for(lambda: None in heard, 30, "the listener's first wake-up")
        heard.clear()
    else:
        stop = subscribe(heard.append)
    try:
        job_id = _running_job(factory, account)
        wait_for(lambda: heard, 30, "the notice of a committed event")
        with session_scope(factory) as s:
            append_event(s, s.get_one(Job, job_id), "progress")
            assert heard == [job_id]  # not yet: the transaction is open
        wait_for(lambda: len(heard) == 2, 30, "the second notice")
        s = factory()
        append_event(s, s.get_one(Job, job_id), "dropped")
        s.rollback()
        s.close()
        with session_scope(factory) as s:
            append_event(s, s.get_one(Job, job_id), "last")
        wait_for(lambda: len(heard) == 3, 30, "the third notice")
        assert heard == [job_id] * 3
    finally:
        stop()


def test_a_listener_wakes_every_feed_after_it_reconnects(empty_db_url: str) -> None:
    if not empty_db_url.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    engine = make_engine(empty_db_url)
    heard: list[uuid.UUID | None] = []
    listener = Listener(engine, heard.append, poll_s=0.05).start()
    try:
        wait_for(lambda: heard == [None], 30, "the wake-up after connecting")
        with engine.connect() as conn:  # kill the listener's connection: it reconnects and wakes everyone again
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE query LIKE 'LISTEN%%' AND datname = current_database()")
        wait_for(lambda: heard == [None, None], 30, "the wake-up after reconnecting")
    finally:
        listener.stop()
        engine.dispose()
