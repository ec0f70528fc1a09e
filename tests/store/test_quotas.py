"""Quotas: usage is counted per user from jobs and datasets, limits are overrides or the defaults, and a check that
fails says which quota and what would free it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

from domain.errors import QuotaExceeded
from infra.settings import Settings
from store.base import utcnow
from store.jobs import transition
from store.models import Job, JobState, User
from store.quotas import WINDOW, check_job, check_storage, set_quota, usage
from tests.store.factories import make_dataset, make_job, make_user, walk_job

SETTINGS = Settings(max_active_jobs_per_user=2, device_seconds_per_30_days=10_000, storage_bytes_per_user=5_000)


def _job(session: Session, owner: User, state: JobState, *, budget: int = 600, spent: float = 0.0,
         age: timedelta = timedelta(0)) -> Job:
    job = make_job(session, owner)
    job.budget_seconds, job.device_seconds, job.created_at = budget, spent, utcnow() - age
    walk_job(job, state)
    session.flush()
    return job


def test_usage_counts_the_users_own_active_jobs_device_time_and_datasets(session: Session) -> None:
    ada, bob = make_user(session), make_user(session)
    _job(session, ada, JobState.QUEUED, budget=1_000)  # holds its whole budget
    _job(session, ada, JobState.RUNNING, budget=2_000, spent=500.4)  # holds its budget, not just what it spent
    _job(session, ada, JobState.SUCCEEDED, budget=9_000, spent=300.0)  # charged what it spent
    _job(session, ada, JobState.FAILED, budget=9_000, spent=50.0)
    _job(session, ada, JobState.SUCCEEDED, spent=4_000.0, age=WINDOW + timedelta(hours=1))  # out of the window
    _job(session, bob, JobState.RUNNING, budget=7_000)
    make_dataset(session, ada, "a").size_bytes = 1_200
    make_dataset(session, ada, "b").size_bytes = 300
    make_dataset(session, bob, "c").size_bytes = 4_000
    session.flush()  # the factories' job datasets are 1234 bytes each: 5 of ada's
    quotas = usage(session, ada, SETTINGS)
    assert (quotas.active_jobs.used, quotas.active_jobs.limit) == (2, 2)
    assert quotas.device_seconds.used == 1_000 + 2_000 + 300 + 50
    assert quotas.storage_bytes.used == 1_200 + 300 + 5 * 1234
    assert quotas.storage_bytes.left == 0  # over the limit: nothing left, never a negative number
    assert not quotas.active_jobs.overridden


def test_an_override_replaces_the_default_and_none_restores_it(session: Session) -> None:
    user = make_user(session)
    set_quota(user, {"active_jobs": 5, "storage_bytes": 0})
    quotas = usage(session, user, SETTINGS)
    assert (quotas.active_jobs.limit, quotas.active_jobs.overridden) == (5, True)
    assert (quotas.storage_bytes.limit, quotas.storage_bytes.overridden) == (0, True)
    assert (quotas.device_seconds.limit, quotas.device_seconds.overridden) == (10_000, False)
    set_quota(user, {"active_jobs": None})
    assert usage(session, user, SETTINGS).active_jobs == usage(session, make_user(session), SETTINGS).active_jobs


@pytest.mark.parametrize(("changes", "message"), [({"gpus": 1}, "no quota 'gpus'"),
                                                  ({"device_seconds": -1}, "cannot be negative")])
def test_unknown_quotas_and_negative_limits_are_refused(session: Session, changes: dict[str, int],
                                                        message: str) -> None:
    with pytest.raises(ValueError, match=message):
        set_quota(make_user(session), changes)


def test_a_job_over_the_active_jobs_limit_is_refused_until_one_ends(session: Session) -> None:
    user = make_user(session)
    check_job(session, user, SETTINGS, 600)
    first, _ = _job(session, user, JobState.QUEUED), _job(session, user, JobState.RUNNING)
    with pytest.raises(QuotaExceeded) as refused:
        check_job(session, user, SETTINGS, 600)
    assert refused.value.reason == "quota-active-jobs"
    assert "2 queued or running" in refused.value.detail and "cancel one" in refused.value.detail
    transition(first, JobState.CANCELLED)
    session.flush()
    check_job(session, user, SETTINGS, 600)


def test_a_budget_that_does_not_fit_the_device_seconds_left_is_refused(session: Session) -> None:
    user = make_user(session)
    _job(session, user, JobState.SUCCEEDED, spent=6_000.0)
    check_job(session, user, SETTINGS, 4_000)  # exactly what is left
    _job(session, user, JobState.QUEUED, budget=1_000)
    with pytest.raises(QuotaExceeded) as refused:
        check_job(session, user, SETTINGS, 3_001)
    assert refused.value.reason == "quota-device-seconds"
    detail = refused.value.detail
    assert "3000 of your 10000" in detail and "at most 3000" in detail and "cancel a queued or running" in detail


def test_the_refusal_says_when_old_jobs_leave_the_window(session: Session) -> None:
    user = make_user(session)
    old = _job(session, user, JobState.SUCCEEDED, spent=3_000.0, age=WINDOW - timedelta(days=2))
    _job(session, user, JobState.SUCCEEDED, spent=6_000.0, age=timedelta(days=1))
    now = utcnow()
    with pytest.raises(QuotaExceeded) as refused:
        check_job(session, user, SETTINGS, 2_000, now=now)
    assert f"wait until {(old.created_at + WINDOW).isoformat(timespec='seconds')}" in refused.value.detail
    with pytest.raises(QuotaExceeded) as never:  # only the budget itself is over the whole quota: no date helps
        check_job(session, user, SETTINGS, 20_000, now=now)
    assert "wait until" not in never.value.detail


def test_storage_is_refused_past_the_limit_with_what_to_free(session: Session) -> None:
    user = make_user(session)
    make_dataset(session, user).size_bytes = 4_000
    session.flush()
    check_storage(session, user, SETTINGS, 1_000)
    with pytest.raises(QuotaExceeded) as refused:
        check_storage(session, user, SETTINGS, 1_500)
    assert refused.value.reason == "quota-storage"
    assert "use 4000 of your 5000 bytes" in refused.value.detail
    assert "free at least 500 bytes" in refused.value.detail
    with pytest.raises(QuotaExceeded) as too_big:
        check_storage(session, user, SETTINGS, 6_000)
    assert "larger than your whole quota" in too_big.value.detail
