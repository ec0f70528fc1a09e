"""The reaper's share for explanation requests (`store.explain_runs`): each pass settles the running requests no task
will (their heartbeat stopped, or they are past their hard time limit) and sends again the queued ones whose task
was lost or never published."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from celery import Celery

from domain.errors import Unavailable
from infra.broker import enqueue_explain
from infra.settings import Settings
from store.base import utcnow
from store.db import make_engine, make_session_factory, session_scope
from store.explain_runs import Settled, claim_publish, settle, stranded, unsent

log = logging.getLogger(__name__)


@dataclass
class Reaped:
    """What one pass did, by request id: queued again and sent, failed, or sent again while queued."""

    requeued: list[uuid.UUID] = field(default_factory=list)
    failed: list[uuid.UUID] = field(default_factory=list)
    republished: list[uuid.UUID] = field(default_factory=list)


def reap_explanations_once(settings: Settings, sender: Celery, now: datetime | None = None) -> Reaped:
    """One pass of the reaper over explanation requests; tasks are sent with `sender` to `settings.explain_queue`."""
    now = now or utcnow()
    engine = make_engine(settings.database_url)
    reaped = Reaped()
    try:
        factory = make_session_factory(engine)
        with factory() as session:
            found = stranded(session, now, settings.lease_seconds)
        for seen in found:
            with session_scope(factory) as session:
                settled = settle(session, seen, now, settings.explain_max_attempts)
            if settled is Settled.REQUEUED:
                reaped.requeued.append(seen.id)
                _send(sender, settings, seen.id, f"its worker stopped: queued again for attempt {seen.attempts + 1}")
            elif settled is not None:
                reaped.failed.append(seen.id)
                log.warning("explanation %s failed (%s): its worker stopped", seen.id, settled.value)
        with factory() as session:
            waiting = unsent(session, now, settings.republish_after_s)
        for seen in waiting:
            with session_scope(factory) as session:
                claimed = claim_publish(session, seen, now)
            if claimed:  # else another reaper sent it, or a worker took it, since it was read
                reaped.republished.append(seen.id)
                _send(sender, settings, seen.id, "still queued: its task was published again")
        return reaped
    finally:
        engine.dispose()


def _send(sender: Celery, settings: Settings, explanation_id: uuid.UUID, what: str) -> None:
    """Send the request's task; a broker that does not answer leaves it queued, for the next republish."""
    try:
        enqueue_explain(sender, str(explanation_id), settings.explain_queue)
    except Unavailable:
        log.warning("explanation %s: %s, but the broker did not answer; sent again later", explanation_id, what,
                    exc_info=True)
        return
    log.warning("explanation %s: %s", explanation_id, what)
