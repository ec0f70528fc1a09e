"""The outbox of queued jobs: a job committed but never published is due for a republish after the grace period,
and each republish is claimed by exactly one reaper, however many read the job at once (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from store.db import session_scope
from store.leases import claim
from store.models import Job
from store.outbox import Publish, Unpublished, claim_publish, due, release_publish
from tests.store.factories import committed_job

GRACE = 300.0


def _claim(factory: sessionmaker[Session], job: Unpublished, now: datetime) -> Publish | None:
    with session_scope(factory) as s:
        return claim_publish(s, job, now)


def test_a_job_never_published_is_due_once_per_grace_period(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    start = job.created_at
    with factory() as s:
        assert due(s, start + timedelta(seconds=GRACE - 1), GRACE) == []  # not yet: the API may be publishing it
        (seen,) = due(s, start + timedelta(seconds=GRACE + 1), GRACE)
    assert seen.id == job.id and seen.published_at is None and seen.sent_at == start

    first = start + timedelta(seconds=GRACE + 1)
    claimed = _claim(factory, seen, first)
    assert claimed is not None and claimed.published_at == first and claimed.queue == "cpu"
    assert claimed.budget_seconds == 600
    assert _claim(factory, seen, first) is None  # the same stale view again: already claimed, not twice
    with factory() as s:
        assert s.get_one(Job, job.id).published_at == first
        assert due(s, first + timedelta(seconds=GRACE - 1), GRACE) == []  # a grace period from the republish
        (again,) = due(s, first + timedelta(seconds=GRACE + 1), GRACE)
    assert again.published_at == first
    assert _claim(factory, again, first + timedelta(seconds=GRACE + 1)) is not None


def test_a_republish_whose_publish_failed_is_given_back(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    now = job.created_at + timedelta(seconds=GRACE + 1)
    with factory() as s:
        (seen,) = due(s, now, GRACE)
    claimed = _claim(factory, seen, now)
    assert claimed is not None
    with session_scope(factory) as s:
        assert release_publish(s, claimed)
    with factory() as s:
        assert s.get_one(Job, job.id).published_at is None
        assert [j.id for j in due(s, now, GRACE)] == [job.id]  # due again at the next pass


def test_a_job_a_worker_took_is_not_published_again(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    now = job.created_at + timedelta(seconds=GRACE + 1)
    with factory() as s:
        (seen,) = due(s, now, GRACE)
    with session_scope(factory) as s:  # a worker takes the job between the reaper's read and its claim
        claim(s, job.id, "w1", 60.0)
    assert _claim(factory, seen, now) is None
    with factory() as s:
        assert due(s, now + timedelta(days=1), GRACE) == []


def test_concurrent_reapers_claim_a_republish_once(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    now = job.created_at + timedelta(seconds=GRACE + 1)
    with factory() as s:
        (seen,) = due(s, now, GRACE)  # every reaper read the job before any claimed it
    reapers = 6
    barrier, won, errors = threading.Barrier(reapers), list[int](), list[Exception]()

    def reaper() -> None:
        try:
            barrier.wait()
            if _claim(factory, seen, now) is not None:
                won.append(1)
        except Exception as exc:  # pragma: no cover - shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=reaper) for _ in range(reapers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(won) == 1
