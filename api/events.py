"""A job's event log as Server-Sent Events: every event after a given seq, then live ones until the job ends.

Each SSE event carries `id:` = the event's seq (so a reconnecting EventSource resumes with `Last-Event-ID`),
`event:` = its kind and `data:` = the event as JSON. Once the job is terminal and every event has been sent, a
final `end` event (data `{"state": ...}`) closes the stream. Reference: the WHATWG HTML "Server-sent events"
section, https://html.spec.whatwg.org/multipage/server-sent-events.html.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio.to_thread
from sqlalchemy.orm import Session, sessionmaker
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.schemas.jobs import JobEventOut
from store.jobs import TERMINAL, events_since
from store.models import Job, JobState

POLL_SECONDS = 0.25
"""How often the stream looks for new events."""
PING_SECONDS = 15.0
"""How often an idle stream sends a keep-alive comment."""
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


@dataclass(frozen=True)
class _Poll:
    state: JobState | None
    events: list[JobEventOut]


def _poll(factory: sessionmaker[Session], job_id: uuid.UUID, after: int) -> _Poll:
    """The job's state (None once deleted) and then its events after `after`, read in one short session.

    The state is read first: when it is terminal, every event committed before it is in the list.
    """
    with factory() as session:
        job = session.get(Job, job_id)
        if job is None:
            return _Poll(None, [])
        return _Poll(JobState(job.state), [JobEventOut.model_validate(e) for e in events_since(session, job, after)])


async def _stream(factory: sessionmaker[Session], job_id: uuid.UUID, after: int) -> AsyncIterator[ServerSentEvent]:
    while True:
        poll = await anyio.to_thread.run_sync(_poll, factory, job_id, after)
        for event in poll.events:
            yield ServerSentEvent(data=event.model_dump_json(), event=event.kind, id=str(event.seq))
            after = event.seq
        if poll.state is None or (poll.state in TERMINAL and not poll.events):
            state = None if poll.state is None else poll.state.value
            yield ServerSentEvent(data=json.dumps({"state": state}), event="end")
            return
        if not poll.events:
            await anyio.sleep(POLL_SECONDS)


def event_stream(factory: sessionmaker[Session], job_id: uuid.UUID, after: int) -> EventSourceResponse:
    """Stream job `job_id`'s events with a seq above `after` as SSE, polling through fresh `factory` sessions.

    The caller checks that the requester may read the job; the stream stops when the client disconnects.
    """
    return EventSourceResponse(_stream(factory, job_id, after), ping=PING_SECONDS)
