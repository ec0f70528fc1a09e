"""An explanation request's attempts: claimed and counted, dropped while another live worker answers it, failed
once its attempts are spent; the reaper fails one past its time limit, queues again one whose worker died while
attempts are left, sends again one whose task was lost, and every failure releases its owner's quotas."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from domain.errors import QuotaExceeded
from infra.broker import EXPLAIN_HARD_SECONDS
from infra.settings import Settings
from store.base import utcnow
from store.db import session_scope
from store.explain_runs import (
    GRACE_SECONDS,
    TIME_LIMIT,
    WORKER_LOST,
    Settled,
    Taken,
    beat,
    claim,
    claim_publish,
    settle,
    stranded,
    unsent,
)
from store.explanations import create_explanation, finish_explanation
from store.models import ExplanationRequest, ExplanationState, Job, User
from store.quotas import active_explanations, check_storage, explanation_bytes, explanation_seconds
from tests.store.factories import make_model

LEASE, MOST = 60.0, 3
SETTINGS = Settings(max_active_explanations_per_user=5)


def _asked(factory: sessionmaker[Session]) -> tuple[uuid.UUID, uuid.UUID]:
    """A queued request of a new user's model: (its id, the user's id)."""
    with session_scope(factory) as s:
        model = make_model(s, classes=["a", "b"], preprocessing={"kind": "text"})
        row = create_explanation(s, model, "occlusion", text="a good film")
        return row.id, s.get_one(Job, model.job_id).owner_id


def _row(factory: sessionmaker[Session], explanation_id: uuid.UUID) -> ExplanationRequest:
    with factory() as s:
        return s.get_one(ExplanationRequest, explanation_id)


def _claim(factory: sessionmaker[Session], explanation_id: uuid.UUID, owner: str, *, dead: bool = False,
           now: datetime | None = None) -> Taken:
    with session_scope(factory) as s:
        return claim(s, explanation_id, owner, LEASE, MOST, lambda _worker: dead, now)


def _usage(factory: sessionmaker[Session], user_id: uuid.UUID) -> tuple[int, int]:
    """The user's active explanations and their device-seconds."""
    with factory() as s:
        user = s.get_one(User, user_id)
        return (active_explanations(s, user, SETTINGS).used,
                explanation_seconds(s, user, utcnow() - timedelta(days=30)))


def test_each_attempt_is_counted_and_a_live_holder_keeps_the_request(factory: sessionmaker[Session]) -> None:
    asked, _ = _asked(factory)
    assert _claim(factory, asked, "h:1:a") is Taken.CLAIMED
    row = _row(factory, asked)
    assert (row.state, row.attempts, row.worker) == (ExplanationState.RUNNING, 1, "h:1:a")
    assert _claim(factory, asked, "h:2:b") is Taken.BUSY  # a second copy while the first worker beats: dropped
    assert _row(factory, asked).attempts == 1
    assert _claim(factory, asked, "h:2:b", dead=True) is Taken.CLAIMED  # its holder's process is gone
    later = utcnow() + timedelta(seconds=LEASE + 1)
    assert _claim(factory, asked, "h:3:c", now=later) is Taken.CLAIMED  # or its heartbeat stopped a lease ago
    assert (_row(factory, asked).attempts, _row(factory, asked).worker) == (3, "h:3:c")
    with session_scope(factory) as s:
        assert finish_explanation(s, asked, {"input": "0"})
    assert _claim(factory, asked, "h:4:d", dead=True) is Taken.ANSWERED
    assert _claim(factory, uuid.uuid4(), "h:4:d") is Taken.MISSING


def test_after_its_last_attempt_died_the_request_fails_and_frees_its_place(factory: sessionmaker[Session]) -> None:
    asked, user = _asked(factory)
    for attempt in range(MOST):
        assert _claim(factory, asked, f"h:{attempt}:x", dead=True) is Taken.CLAIMED
    assert _usage(factory, user) == (1, EXPLAIN_HARD_SECONDS)
    assert _claim(factory, asked, "h:9:y", dead=True) is Taken.FAILED  # redelivered once more: not run again
    row = _row(factory, asked)
    assert (row.state, row.reason, row.attempts, row.worker) == (ExplanationState.FAILED, WORKER_LOST, MOST, None)
    assert f"not retried after {MOST} attempts" in str(row.error)
    assert _usage(factory, user) == (0, 0)  # no longer active, and it holds no device time


def test_a_heartbeat_charges_its_seconds_and_says_whether_the_request_is_still_held(
        factory: sessionmaker[Session]) -> None:
    asked, user = _asked(factory)
    assert _claim(factory, asked, "h:1:a") is Taken.CLAIMED
    with session_scope(factory) as s:
        assert beat(s, asked, "h:1:a", 2.5)
        assert not beat(s, asked, "h:2:b", 1.25)  # not its holder: charged all the same
    assert _row(factory, asked).device_seconds == pytest.approx(3.75)
    with session_scope(factory) as s:
        assert finish_explanation(s, asked, {"input": "0"})
        assert not beat(s, asked, "h:1:a", 0.5)  # answered: no longer held
    row = _row(factory, asked)
    assert row.device_seconds == pytest.approx(4.25) and row.worker is None and row.beat_at is None
    assert _usage(factory, user) == (0, 4)


def _strand(factory: sessionmaker[Session], asked: uuid.UUID, ran_s: float, beat_ago_s: float,
            attempts: int = 1) -> datetime:
    """Make the request running as a worker left it: its attempt began `ran_s` + `beat_ago_s` seconds ago and beat
    last `beat_ago_s` seconds ago; return now."""
    now = utcnow()
    with session_scope(factory) as s:
        row = s.get_one(ExplanationRequest, asked)
        row.state, row.attempts, row.worker = ExplanationState.RUNNING, attempts, "elsewhere:1:x"
        row.started_at = now - timedelta(seconds=ran_s + beat_ago_s)
        row.beat_at = now - timedelta(seconds=beat_ago_s)
    return now


def _reap(factory: sessionmaker[Session], now: datetime) -> list[Settled | None]:
    with factory() as s:
        found = stranded(s, now, LEASE)
    outcomes = []
    for seen in found:
        with session_scope(factory) as s:
            outcomes.append(settle(s, seen, now, MOST))
    return outcomes


def test_the_reaper_fails_a_request_killed_at_its_hard_time_limit_and_releases_its_quota(
        factory: sessionmaker[Session]) -> None:
    asked, user = _asked(factory)
    now = _strand(factory, asked, ran_s=EXPLAIN_HARD_SECONDS - 15, beat_ago_s=LEASE - 1)
    assert _reap(factory, now) == []  # its heartbeat is not a lease old yet
    assert _usage(factory, user) == (1, EXPLAIN_HARD_SECONDS)
    assert _reap(factory, now + timedelta(seconds=2)) == [Settled.TIMED_OUT]
    row = _row(factory, asked)
    assert (row.state, row.reason, row.worker) == (ExplanationState.FAILED, TIME_LIMIT, None)
    assert "time limit" in str(row.error)
    assert _usage(factory, user) == (0, 0)
    assert _reap(factory, now + timedelta(seconds=3)) == []  # settled once


def test_the_reaper_fails_a_request_past_its_hard_limit_even_while_it_beats(factory: sessionmaker[Session]) -> None:
    asked, _ = _asked(factory)
    now = _strand(factory, asked, ran_s=EXPLAIN_HARD_SECONDS + GRACE_SECONDS + 1, beat_ago_s=0)
    assert _reap(factory, now) == [Settled.TIMED_OUT]
    assert _row(factory, asked).reason == TIME_LIMIT


def test_the_reaper_queues_again_a_request_whose_worker_died_until_its_attempts_are_spent(
        factory: sessionmaker[Session]) -> None:
    asked, user = _asked(factory)
    now = _strand(factory, asked, ran_s=5, beat_ago_s=LEASE + 1)
    assert _reap(factory, now) == [Settled.REQUEUED]
    row = _row(factory, asked)
    assert (row.state, row.attempts, row.worker, row.published_at) == (ExplanationState.QUEUED, 1, None, now)
    assert _usage(factory, user)[0] == 1  # still to be answered
    now = _strand(factory, asked, ran_s=5, beat_ago_s=LEASE + 1, attempts=MOST)
    assert _reap(factory, now) == [Settled.GAVE_UP]
    row = _row(factory, asked)
    assert (row.state, row.reason) == (ExplanationState.FAILED, WORKER_LOST)
    assert _usage(factory, user) == (0, 0)


def test_a_reaper_acts_only_on_the_request_as_it_read_it(factory: sessionmaker[Session]) -> None:
    asked, _ = _asked(factory)
    now = _strand(factory, asked, ran_s=5, beat_ago_s=LEASE + 1)
    with factory() as s:
        (seen,) = stranded(s, now, LEASE)
    assert _claim(factory, asked, "h:2:b") is Taken.CLAIMED  # a redelivered task took it over meanwhile
    with session_scope(factory) as s:
        assert settle(s, seen, now, MOST) is None
    assert _row(factory, asked).worker == "h:2:b"


def test_a_request_whose_task_was_lost_is_sent_again_once_per_period(factory: sessionmaker[Session]) -> None:
    asked, _ = _asked(factory)
    created = _row(factory, asked).created_at
    with factory() as s:
        assert unsent(s, created + timedelta(seconds=299), 300) == []
        (seen,) = unsent(s, created + timedelta(seconds=301), 300)
    first = created + timedelta(seconds=301)
    with session_scope(factory) as s:
        assert claim_publish(s, seen, first)
    with session_scope(factory) as s:
        assert not claim_publish(s, seen, first)  # another reaper read the same row: it does not send it again
    with factory() as s:
        assert unsent(s, first + timedelta(seconds=299), 300) == []
        assert [r.id for r in unsent(s, first + timedelta(seconds=301), 300)] == [asked]
    assert _claim(factory, asked, "h:1:a") is Taken.CLAIMED
    with factory() as s:
        assert unsent(s, first + timedelta(seconds=3000), 300) == []  # taken: never sent again


def test_a_dataset_upload_counts_the_explanations_bytes(factory: sessionmaker[Session]) -> None:
    asked, user_id = _asked(factory)
    with session_scope(factory) as s:
        assert finish_explanation(s, asked, {"input": "0", "scores": [0.5] * 100})
    with session_scope(factory) as s:
        user = s.get_one(User, user_id)
        stored = explanation_bytes(s, user)
        assert stored == _row(factory, asked).size_bytes > len("a good film")
        settings = Settings(storage_bytes_per_user=1234 + stored + 10)  # its model's job's dataset is 1234 bytes
        check_storage(s, user, settings, 10)
        with pytest.raises(QuotaExceeded, match="datasets and explanations use") as refused:
            check_storage(s, user, settings, 11)
        assert refused.value.reason == "quota-storage"
