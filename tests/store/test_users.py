"""Admin operations: disabling a user stops its keys and jobs at once; enabling it brings its keys back."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from domain.errors import NotFound
from store.apikeys import create_api_key, verify_api_key
from store.db import session_scope
from store.jobs import transition
from store.models import Job, JobEvent, JobState
from store.users import Stopped, all_users, disable_user, enable_user, user_by_email
from tests.store.factories import make_job, make_user


def test_disabling_cancels_queued_jobs_stops_running_ones_and_refuses_the_keys(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        ada, bob = make_user(s, "ada@example.org"), make_user(s, "bob@example.org")
        key = create_api_key(s, ada).plaintext
        queued, running, done, bobs = make_job(s, ada), make_job(s, ada), make_job(s, ada), make_job(s, bob)
        transition(running, JobState.RUNNING)
        transition(done, JobState.RUNNING)
        transition(done, JobState.SUCCEEDED)
        ids = [job.id for job in (queued, running, done, bobs)]
    with session_scope(factory) as s:
        stopped = disable_user(s, user_by_email(s, "ada@example.org"))
    assert (stopped.cancelled, stopped.stopping) == (1, 1)
    with factory() as s:
        jobs = [s.get(Job, job_id) for job_id in ids]
        assert [job.state if job else None for job in jobs] == [JobState.CANCELLED, JobState.RUNNING,
                                                                  JobState.SUCCEEDED, JobState.QUEUED]
        assert jobs[1] is not None and jobs[1].cancel_requested_at is not None
        assert jobs[3] is not None and jobs[3].cancel_requested_at is None  # another user's job is untouched
        kinds = s.scalars(select(JobEvent.kind).where(JobEvent.job_id.in_(ids[:2])).order_by(JobEvent.seq))
        assert list(kinds) == ["cancelled", "cancel_requested"]
        assert verify_api_key(s, key) is None


def test_disabling_again_keeps_the_time_and_enabling_brings_the_keys_back(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        key = create_api_key(s, make_user(s, "ada@example.org")).plaintext
    with session_scope(factory) as s:
        disable_user(s, user_by_email(s, "ada@example.org"))
    with session_scope(factory) as s:
        user = user_by_email(s, " ada@example.org ")
        first = user.disabled_at
        assert disable_user(s, user) == Stopped(cancelled=0, stopping=0)
        assert user.disabled_at == first
        enable_user(user)
    with factory() as s:
        assert verify_api_key(s, key) is not None


def test_lookups(session: Session) -> None:
    make_user(session, "b@example.org")
    make_user(session, "a@example.org")
    assert [u.email for u in all_users(session)] == ["b@example.org", "a@example.org"]  # oldest first
    with pytest.raises(NotFound, match=r"no user with email 'c@example\.org'"):
        user_by_email(session, "c@example.org")
