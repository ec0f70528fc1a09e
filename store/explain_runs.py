"""How an explanation request's attempts run and end, whatever happens to the worker running one.

A worker takes a request with `claim`: it becomes `running` under the worker's name, its attempt count grows, and a
heartbeat (`beat`, every third of `Settings.lease_seconds`) says the worker lives and adds the seconds it spent to the
row's device-seconds (`charge`; its owner's quota counts them). A redelivered task (Celery requeues it when its pool
process dies) finds the request running: it drops while the holder's heartbeat is fresh and the holder is not a
process known dead, and otherwise takes it over as the next attempt. After `Settings.explain_max_attempts` attempts
whose workers died, the request fails (`worker-lost`) instead of running again: an input that kills its worker every
time costs a bounded number of attempts.

The workers' reaper settles what no task will: a running request whose heartbeat stopped (its whole worker died, or
Celery killed its process at the hard time limit, which acknowledges the task: nothing is redelivered), or whose
attempt is past the hard time limit and its grace. One that ran past its soft time limit fails (`time-limit`: another
attempt would run as long); one whose worker died is queued again and sent anew while attempts are left, and fails
(`worker-lost`) when none are. A request still queued `Settings.republish_after_s` after it was last sent (the API
stopped between its commit and its publish, or the broker lost the message) is sent again, once per period. Each
change is made on the row locked and as the reaper read it, so a worker that took the request meanwhile keeps it,
and of two reapers one acts. A failed request no longer counts among its owner's active explanations.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from infra.broker import EXPLAIN_HARD_SECONDS, EXPLAIN_SECONDS
from store.base import utcnow
from store.explanations import PENDING, fail_explanation, find_explanation
from store.models import ExplanationRequest, ExplanationState

WORKER_LOST, TIME_LIMIT = "worker-lost", "time-limit"
"""The `reason` of a request that failed because its workers kept dying, or because it ran past its time limit."""
GRACE_SECONDS = 60
"""How long past its hard time limit an attempt that still beats is left alone before the reaper fails it."""


class Taken(enum.StrEnum):
    """What a worker's `claim` found."""

    CLAIMED = "claimed"  # the caller now answers the request
    ANSWERED = "answered"  # done, failed or deleted: nothing to do
    MISSING = "missing"  # no such request
    BUSY = "busy"  # another live worker is answering it: drop the task
    FAILED = "failed"  # its attempts are spent: now failed (`worker-lost`)


def _gave_up(attempts: int, most: int) -> str:
    return (f"its worker stopped {attempts} time(s) before answering (killed, out of memory or past its time "
            f"limit); not retried after {most} attempts")


def claim(session: Session, explanation_id: uuid.UUID, owner: str, lease_s: float, max_attempts: int,
          holder_dead: Callable[[str], bool] = lambda _owner: False, now: datetime | None = None) -> Taken:
    """Take the request for `owner` (its next attempt); `holder_dead(worker)` may say a holder whose heartbeat looks
    fresh is a process that died. Commit before answering."""
    row = find_explanation(session, explanation_id, lock=True)
    if row is None:
        return Taken.MISSING
    if row.state not in PENDING:
        return Taken.ANSWERED
    now = now or utcnow()
    holder, beat = row.worker, row.beat_at
    if (row.state is ExplanationState.RUNNING and holder is not None and holder != owner and beat is not None
            and beat > now - timedelta(seconds=lease_s) and not holder_dead(holder)):
        return Taken.BUSY
    if row.attempts >= max_attempts:
        fail_explanation(session, explanation_id, WORKER_LOST, _gave_up(row.attempts, max_attempts))
        return Taken.FAILED
    row.state, row.attempts = ExplanationState.RUNNING, row.attempts + 1
    row.worker, row.started_at, row.beat_at = owner, now, now
    return Taken.CLAIMED


def charge(session: Session, explanation_id: uuid.UUID, seconds: float) -> None:
    """Add `seconds` a worker process spent on the request to its device-seconds (an UPDATE that reads nothing
    first, so that two attempts' charges both count)."""
    seconds = round(max(seconds, 0.0), 3)
    session.execute(update(ExplanationRequest).where(ExplanationRequest.id == explanation_id)
                    .values(device_seconds=ExplanationRequest.device_seconds + seconds)
                    .execution_options(synchronize_session=False))


def beat(session: Session, explanation_id: uuid.UUID, owner: str, seconds: float,
         now: datetime | None = None) -> bool:
    """`owner`'s heartbeat: charge `seconds` and say it still answers the request; False when it no longer holds it
    (answered, or taken over by another attempt), its seconds charged all the same."""
    charge(session, explanation_id, seconds)
    held = session.execute(update(ExplanationRequest)
                           .where(ExplanationRequest.id == explanation_id,
                                  ExplanationRequest.state == ExplanationState.RUNNING,
                                  ExplanationRequest.worker == owner)
                           .values(beat_at=now or utcnow()).returning(ExplanationRequest.id)
                           .execution_options(synchronize_session=False)).first()
    return held is not None


@dataclass(frozen=True)
class Seen:
    """A pending request as the reaper read it: what its change must still find."""

    id: uuid.UUID
    state: ExplanationState
    attempts: int
    worker: str | None
    started_at: datetime | None
    beat_at: datetime | None
    published_at: datetime | None
    created_at: datetime


_COLUMNS = (ExplanationRequest.id, ExplanationRequest.state, ExplanationRequest.attempts, ExplanationRequest.worker,
            ExplanationRequest.started_at, ExplanationRequest.beat_at, ExplanationRequest.published_at,
            ExplanationRequest.created_at)


def stranded(session: Session, now: datetime, lease_s: float, limit: int = 100) -> list[Seen]:
    """Running requests whose heartbeat stopped `lease_s` seconds ago, or whose attempt began longer ago than the
    hard time limit and its grace, oldest first."""
    stale = now - timedelta(seconds=lease_s)
    overdue = now - timedelta(seconds=EXPLAIN_HARD_SECONDS + GRACE_SECONDS)
    rows = session.execute(select(*_COLUMNS).where(
        ExplanationRequest.state == ExplanationState.RUNNING,
        or_(ExplanationRequest.beat_at.is_(None), ExplanationRequest.beat_at < stale,
            ExplanationRequest.started_at < overdue)).order_by(ExplanationRequest.created_at).limit(limit))
    return [Seen(*row) for row in rows]


def unsent(session: Session, now: datetime, after_s: float, limit: int = 100) -> list[Seen]:
    """Queued requests last sent (by a reaper, or else by the API when it created them) more than `after_s` seconds
    before `now`, oldest first."""
    since = now - timedelta(seconds=after_s)
    sent = func.coalesce(ExplanationRequest.published_at, ExplanationRequest.created_at)
    rows = session.execute(select(*_COLUMNS).where(ExplanationRequest.state == ExplanationState.QUEUED,
                                                   or_(and_(ExplanationRequest.published_at.is_(None),
                                                            ExplanationRequest.created_at < since),
                                                       ExplanationRequest.published_at < since))
                           .order_by(sent).limit(limit))
    return [Seen(*row) for row in rows]


def _unchanged(session: Session, seen: Seen) -> ExplanationRequest | None:
    """The request locked, if it is still as the reaper read it."""
    row = find_explanation(session, seen.id, lock=True)
    if row is None or (row.state, row.attempts, row.worker, row.beat_at, row.published_at) != (
            seen.state, seen.attempts, seen.worker, seen.beat_at, seen.published_at):
        return None
    return row


class Settled(enum.StrEnum):
    """What the reaper did with a stranded request."""

    REQUEUED = "requeued"  # queued again: send its task after the commit
    TIMED_OUT = "timed-out"  # failed: it ran past its time limit
    GAVE_UP = "gave-up"  # failed: its workers died and its attempts are spent


def settle(session: Session, seen: Seen, now: datetime, max_attempts: int) -> Settled | None:
    """End or queue again the stranded request `seen` (`stranded`); None when it changed since it was read."""
    row = _unchanged(session, seen)
    if row is None:
        return None
    started = seen.started_at or now
    ran = ((seen.beat_at or started) - started).total_seconds()  # until its last heartbeat
    if ran >= EXPLAIN_SECONDS:
        fail_explanation(session, seen.id, TIME_LIMIT, f"the explanation ran past its task's time limit "
                         f"({EXPLAIN_SECONDS} s) and its worker process was stopped")
        return Settled.TIMED_OUT
    if seen.attempts >= max_attempts:
        fail_explanation(session, seen.id, WORKER_LOST, _gave_up(seen.attempts, max_attempts))
        return Settled.GAVE_UP
    row.state, row.worker, row.beat_at, row.published_at = ExplanationState.QUEUED, None, None, now
    return Settled.REQUEUED


def claim_publish(session: Session, seen: Seen, now: datetime) -> bool:
    """Claim the republish of the queued request `seen` (`unsent`) for this reaper at `now`; False when another
    reaper claimed it, or a worker took it, since it was read. Commit before publishing."""
    row = _unchanged(session, seen)
    if row is None:
        return False
    row.published_at = now
    return True
