"""Job leases: one worker at a time runs a job; duplicates drop, dead holders are replaced, cancellation wins."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store.base import utcnow
from store.db import session_scope
from store.jobs import events_since, transition
from store.leases import LeaseLost, Outcome, abandoned, claim, hand_over, release, renew, request_cancel
from store.models import Job, JobState
from tests.store.factories import committed_job


@pytest.fixture
def job_id(factory: sessionmaker[Session]):
    return committed_job(factory).id


def _claim(factory: sessionmaker[Session], job_id, owner: str, ttl: float = 60.0, dead: bool = False):
    with session_scope(factory) as s:
        return claim(s, job_id, owner, ttl, lambda _o: dead)


def _kinds(factory: sessionmaker[Session], job_id) -> list[str]:
    with factory() as s:
        return [e.kind for e in events_since(s, s.get_one(Job, job_id))]


def test_first_claim_starts_the_job(factory: sessionmaker[Session], job_id) -> None:
    got = _claim(factory, job_id, "a")
    assert got.outcome is Outcome.CLAIMED and got.attempt == 1
    with factory() as s:
        job = s.get_one(Job, job_id)
        assert job.state is JobState.RUNNING and job.lease_owner == "a" and job.attempts == 1
        assert job.lease_expires_at is not None and job.lease_expires_at > utcnow()
    assert _kinds(factory, job_id) == ["attempt"]


def test_a_live_holder_makes_others_wait(factory: sessionmaker[Session], job_id) -> None:
    _claim(factory, job_id, "a", ttl=30)
    got = _claim(factory, job_id, "b")
    assert got.outcome is Outcome.BUSY and 0 < got.retry_after <= 30
    with factory() as s:
        assert s.get_one(Job, job_id).lease_owner == "a"


def test_a_dead_holder_is_replaced_and_the_job_restarts(factory: sessionmaker[Session], job_id) -> None:
    _claim(factory, job_id, "a")
    got = _claim(factory, job_id, "b", dead=True)
    assert got.outcome is Outcome.CLAIMED and got.attempt == 2
    with session_scope(factory) as s, pytest.raises(LeaseLost):
        renew(s, job_id, "a", 60)
    with factory() as s:
        events = events_since(s, s.get_one(Job, job_id))
    assert [e.payload["restarted"] for e in events] == [False, True]


def test_a_job_whose_workers_keep_dying_fails_after_its_last_attempt(factory: sessionmaker[Session], job_id) -> None:
    for attempt in (1, 2, 3):  # each attempt's worker dies: the next claim finds a dead holder
        got = claim_dead(factory, job_id, f"w{attempt}", max_attempts=3)
        assert got.outcome is Outcome.CLAIMED and got.attempt == attempt
    assert claim_dead(factory, job_id, "w4", max_attempts=3).outcome is Outcome.FAILED
    with factory() as s:
        job = s.get_one(Job, job_id)
        assert job.state is JobState.FAILED and job.attempts == 3 and job.lease_owner is None
        assert job.error is not None and "stopped 3 times" in job.error and "3 attempts" in job.error
    assert _kinds(factory, job_id) == ["attempt"] * 3 + ["failed"]
    assert claim_dead(factory, job_id, "w5").outcome is Outcome.FINISHED  # a later copy of the task drops


def test_a_restart_needs_a_tenth_of_the_budget_left(factory: sessionmaker[Session], job_id) -> None:
    claim_dead(factory, job_id, "a")
    with session_scope(factory) as s:
        job = s.get_one(Job, job_id)
        job.device_seconds = job.budget_seconds * 0.85  # the dead attempt spent 85 %: a restart gets 15 %
    assert claim_dead(factory, job_id, "b").outcome is Outcome.CLAIMED
    with session_scope(factory) as s:
        job = s.get_one(Job, job_id)
        job.device_seconds = job.budget_seconds * 0.95
    assert claim_dead(factory, job_id, "c").outcome is Outcome.FAILED
    with factory() as s:
        error = s.get_one(Job, job_id).error
    assert error is not None and "spent 570 of its 600 device-seconds" in error


def claim_dead(factory: sessionmaker[Session], job_id, owner: str, max_attempts: int = 3):
    """Claim as `owner`, finding any earlier holder dead."""
    with session_scope(factory) as s:
        return claim(s, job_id, owner, 60.0, lambda _o: True, max_attempts)


def test_an_expired_lease_is_taken_over(factory: sessionmaker[Session], job_id) -> None:
    _claim(factory, job_id, "a", ttl=0.001)
    with factory() as s:
        assert [j.id for j in abandoned(s, utcnow() + timedelta(seconds=1))] == [job_id]
    assert _claim(factory, job_id, "b").outcome is Outcome.CLAIMED


def test_finished_or_missing_jobs_are_dropped(factory: sessionmaker[Session], job_id) -> None:
    import uuid

    _claim(factory, job_id, "a")
    with session_scope(factory) as s:
        job = s.get_one(Job, job_id)
        transition(job, JobState.SUCCEEDED)
        release(job)
    assert _claim(factory, job_id, "b").outcome is Outcome.FINISHED
    assert _claim(factory, uuid.uuid4(), "b").outcome is Outcome.FINISHED


def test_cancel_of_a_queued_job_is_immediate(factory: sessionmaker[Session], job_id) -> None:
    with session_scope(factory) as s:
        request_cancel(s, s.get_one(Job, job_id))
    with factory() as s:
        assert s.get_one(Job, job_id).state is JobState.CANCELLED
    assert _claim(factory, job_id, "a").outcome is Outcome.FINISHED


def test_cancel_of_a_running_job_is_requested_then_seen(factory: sessionmaker[Session], job_id) -> None:
    _claim(factory, job_id, "a")
    for _ in range(2):  # idempotent: one request event
        with session_scope(factory) as s:
            request_cancel(s, s.get_one(Job, job_id))
    with session_scope(factory) as s:
        job = renew(s, job_id, "a", 60)
        assert job.state is JobState.RUNNING and job.cancel_requested_at is not None
    assert _kinds(factory, job_id) == ["attempt", "cancel_requested"]
    # a worker that dies now leaves a job the next claim cancels instead of restarting
    assert _claim(factory, job_id, "b", dead=True).outcome is Outcome.CANCELLED


def test_hand_over_frees_the_job_and_postpones_the_next_reap(factory: sessionmaker[Session], job_id) -> None:
    _claim(factory, job_id, "a", ttl=0.001)
    with session_scope(factory) as s:
        (job,) = abandoned(s, utcnow() + timedelta(seconds=1))
        hand_over(s, job, wait_s=600)
    with factory() as s:
        assert abandoned(s, utcnow() + timedelta(seconds=1)) == []
        assert abandoned(s, utcnow() + timedelta(seconds=601)) != []
    assert _claim(factory, job_id, "b").outcome is Outcome.CLAIMED  # claimable at once, nobody holds it
    assert _kinds(factory, job_id) == ["attempt", "requeued", "attempt"]


def test_a_lease_renewed_after_the_reaper_read_it_is_not_handed_over(factory: sessionmaker[Session],
                                                                        job_id) -> None:
    _claim(factory, job_id, "a", ttl=0.001)
    with factory() as reaper:
        (stale,) = abandoned(reaper, utcnow() + timedelta(seconds=1))  # the reaper judges the lease expired
        with session_scope(factory) as s:  # then the worker's heartbeat renews it: it was slow, not dead
            renew(s, job_id, "a", 60)
        assert hand_over(reaper, stale, wait_s=600) is False  # the stale view loses the compare-and-swap
        reaper.commit()
    with factory() as s:
        job = s.get_one(Job, job_id)
        assert job.lease_owner == "a" and job.lease_expires_at is not None
        assert job.lease_expires_at > utcnow() + timedelta(seconds=30)
    with session_scope(factory) as s:
        renew(s, job_id, "a", 60)  # the worker still holds it
    assert _kinds(factory, job_id) == ["attempt"]  # nothing was requeued


def test_of_two_reapers_with_the_same_view_one_hands_the_job_over(factory: sessionmaker[Session], job_id) -> None:
    _claim(factory, job_id, "a", ttl=0.001)
    later = utcnow() + timedelta(seconds=1)
    with factory() as first, factory() as second:
        (mine,) = abandoned(first, later)
        (theirs,) = abandoned(second, later)
        assert hand_over(first, mine, wait_s=600) is True
        first.commit()
        assert hand_over(second, theirs, wait_s=600) is False  # so the job is sent again once, not twice
        second.commit()
    assert _kinds(factory, job_id) == ["attempt", "requeued"]
