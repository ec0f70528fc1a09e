"""A job's event log as Server-Sent Events: every event after a given seq, then live ones until the job ends.

Each SSE event carries `id:` = the event's seq (so a reconnecting EventSource resumes with `Last-Event-ID`),
`event:` = its kind and `data:` = the event as JSON. Once the job is terminal and every event has been sent, a
final `end` event (data `{"state": ...}`) closes the stream. The credential the stream was opened with is checked
again every `CREDENTIAL_SECONDS`: once its browser session has ended (signed out, expired), its API key is revoked or
its user disabled, the stream closes without an `end` (a reconnecting client is answered 401). Reference: the WHATWG
HTML "Server-sent events" section, https://html.spec.whatwg.org/multipage/server-sent-events.html.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator

from sqlalchemy.orm import Session, sessionmaker
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.deps import Credential
from api.fanout import Poll, hub_for, in_reader, read_poll
from store.db import read_scope
from store.jobs import TERMINAL

PING_SECONDS = 15.0
"""How often an idle stream sends a keep-alive comment."""
CREDENTIAL_SECONDS = 5.0
"""How often a stream checks that the credential it was opened with still holds (`api.deps.Credential.holds`)."""
MAX_SEQ = 2**31 - 1
"""The largest event seq (the column is a 32-bit integer)."""

EVENT_STREAM = "text/event-stream"
JSON = "application/json"


def _quality(accept: str, media_type: str) -> float:
    """The q-value `accept` gives `media_type` through its most specific matching range (0 when none)."""
    major = media_type.split("/", 1)[0]
    ranks = {media_type: 2, f"{major}/*": 1, "*/*": 0}
    best_rank, best_q = -1, 0.0
    for part in accept.split(","):
        media_range, *params = (field.strip() for field in part.split(";"))
        rank = ranks.get(media_range.lower(), -1)
        if rank <= best_rank:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        best_rank, best_q = rank, q if 0.0 <= q <= 1.0 else 0.0
    return best_q


def prefers_json(accept: str | None) -> bool:
    """Whether an `Accept` header asks for JSON over an event stream (no header: the event stream)."""
    if not accept:
        return False
    return _quality(accept, JSON) > _quality(accept, EVENT_STREAM)


def _holds(factory: sessionmaker[Session], credential: Credential) -> bool:
    with read_scope(factory) as session:
        return credential.holds(session)


async def _stream(factory: sessionmaker[Session], job_id: uuid.UUID, after: int,
                  credential: Credential) -> AsyncIterator[ServerSentEvent]:
    """The job's events after `after`: its backlog read once, then the live ones from the process's shared feed, for
    as long as `credential` holds."""
    loop = asyncio.get_running_loop()
    check_at = loop.time() + CREDENTIAL_SECONDS
    async with hub_for(factory).watch(job_id, after) as watch:
        feed = watch.feed
        await feed.ready.wait()  # the feed's first read comes before the backlog's: no event falls between them
        changed = feed.changed
        poll = await in_reader(read_poll, factory, job_id, after)
        while True:
            for event in poll.events:
                yield ServerSentEvent(data=event.model_dump_json(), event=event.kind, id=str(event.seq))
                watch.after = event.seq
            if poll.state is None or (poll.state in TERMINAL and not poll.events):
                state = None if poll.state is None else poll.state.value
                yield ServerSentEvent(data=json.dumps({"state": state}), event="end")
                return
            if not poll.events and not feed.done:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), max(0.0, check_at - loop.time()))
            elif not poll.events and not feed.ended:  # the server is stopping: the client resumes with Last-Event-ID
                return
            if loop.time() >= check_at:
                if not await in_reader(_holds, factory, credential):
                    return  # signed out, revoked or disabled: no `end`, the job goes on
                check_at = loop.time() + CREDENTIAL_SECONDS
            changed = feed.changed
            poll = Poll(feed.state, feed.newer(watch.after))


def event_stream(factory: sessionmaker[Session], job_id: uuid.UUID, after: int,
                 credential: Credential) -> EventSourceResponse:
    """Stream job `job_id`'s events with a seq above `after` as SSE, read through fresh `factory` sessions (the
    process's streams of one job share one reader: `api.fanout`).

    The caller checks that the requester, authenticated by `credential`, may read the job; the stream stops when the
    client disconnects, and when the credential no longer holds.
    """
    return EventSourceResponse(_stream(factory, job_id, after, credential), ping=PING_SECONDS)
