"""Device-seconds: a job's are its coordinator's plus those of its trials on other workers, written by both sides
at once without losing either's (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store.db import session_scope
from store.metering import charge_trial, coordinator_seconds, meter_coordinator
from store.models import Job, TrialTask
from tests.store.factories import committed_job


def _trial(factory: sessionmaker[Session], job: Job, index: int) -> TrialTask:
    with session_scope(factory) as s:
        row = TrialTask(job_id=job.id, attempt=1, trial_index=index, request={})
        s.add(row)
        s.flush()
        return row


def _job(factory: sessionmaker[Session], job: Job) -> Job:
    with factory() as s:
        return s.get_one(Job, job.id)


def test_the_coordinator_and_its_trials_add_up_whoever_writes_last(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    trial = _trial(factory, job, 0)
    with session_scope(factory) as s:
        meter_coordinator(s, job.id, 10.0)
    with session_scope(factory) as s:
        charge_trial(s, job.id, trial.id, 4.0)
    with session_scope(factory) as s:
        charge_trial(s, job.id, trial.id, 3.0)  # charged as it passes: the trial's second instalment
    stored = _job(factory, job)
    assert (stored.device_seconds, stored.trial_seconds) == (17.0, 7.0)
    with session_scope(factory) as s:
        meter_coordinator(s, job.id, 12.5)  # the coordinator's next write keeps the trials' seconds
    stored = _job(factory, job)
    assert (stored.device_seconds, stored.trial_seconds) == (19.5, 7.0)
    assert coordinator_seconds(stored) == 12.5  # what a restarted attempt counts on from
    with factory() as s:
        assert s.get_one(TrialTask, trial.id).device_seconds == 7.0


def test_concurrent_trials_lose_no_seconds(factory: sessionmaker[Session]) -> None:
    job = committed_job(factory)
    trials = [_trial(factory, job, i) for i in range(4)]
    barrier, errors = threading.Barrier(len(trials) + 1), list[Exception]()

    def trial_worker(row: TrialTask) -> None:
        try:
            barrier.wait()
            for _ in range(5):
                with session_scope(factory) as s:
                    charge_trial(s, job.id, row.id, 1.0)
        except Exception as exc:  # pragma: no cover - shown by the assertion below
            errors.append(exc)

    def coordinator() -> None:
        try:
            barrier.wait()
            for seconds in range(1, 6):
                with session_scope(factory) as s:
                    meter_coordinator(s, job.id, float(seconds))
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=trial_worker, args=(row,)) for row in trials]
    threads.append(threading.Thread(target=coordinator))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stored = _job(factory, job)
    assert stored.trial_seconds == 20.0
    assert stored.device_seconds == pytest.approx(5.0 + 20.0)
