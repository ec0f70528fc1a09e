"""A job's device-seconds add the seconds of the trials other worker processes ran for it, and its owner's quota sees
the sum: real PostgreSQL, Redis and a Celery worker process that trains a search trial sent by the job's coordinator
(this test process)."""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict

import httpx
import pytest
from sqlalchemy import select

from infra.settings import Settings
from store.blobs import FileBlobStore
from store.db import make_engine, make_session_factory, session_scope
from store.leases import Outcome, claim
from store.models import BudgetTier, Dataset, Job, JobState, TrialState, TrialTask, User
from store.quotas import usage
from synthesis.executor import TrialRequest
from tests.workers.conftest import Digits, make_keys
from tests.workers.jobs import V1
from tests.workers.service import ApiServer, WorkerProcess, wait_for
from workers.app import make_app
from workers.context import Context, worker_identity
from workers.executor import CeleryExecutor
from workers.monitor import JobMonitor
from workers.runner import _end


def _uploaded(settings: Settings, digits: Digits) -> uuid.UUID:
    """The digits, uploaded by alice through the real API (validated and stored as for any job)."""
    keys = make_keys(settings.database_url)
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        with digits.zip_path.open("rb") as f:
            r = client.post(f"{V1}/datasets", headers=keys.alice, files={"file": ("digits.zip", f)})
        assert r.status_code == 201, r.text
        return uuid.UUID(r.json()["id"])


def _trial(ctx: Context, job: Job, dataset: Dataset) -> TrialRequest:
    """The first seed candidate of the job's search, for two epochs on the rows its search trains on (the same
    functions as the engine's and the remote side's)."""
    from synthesis import space
    from synthesis.engine import search_data, space_info, split_task
    from synthesis.interface import Options
    from workers.data import prepare

    task = prepare(dataset, ctx.blobs, ctx.settings.ingest_limits(), job.seed).task
    split, _, data = split_task(task, job.seed, Options().test_fraction)
    info = space_info(task, split.train)
    candidate = space.seeds(info)[0]
    config = candidate.hparams.to_train_config(epochs=2, seed=0, time_limit_s=60.0, patience=None)
    return TrialRequest(0, candidate.to_dict(), space.to_spec(candidate, info).to_dict(), asdict(config), {},
                        horizon=4, eta=3, not_after=time.time() + 240,
                        train_rows=len(search_data(data, job.seed).x_train))


def test_a_job_s_device_seconds_include_the_trials_another_worker_ran(
        pg_redis_settings: Settings, digits: Digits, worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    dataset_id = _uploaded(settings, digits)
    worker = WorkerProcess(settings, settings.blob_dir.parent / "worker.log")  # the second worker: trains the trial
    worker_factory.append(worker)
    engine = make_engine(settings.database_url)
    ctx = Context(settings, make_session_factory(engine), FileBlobStore(settings.blob_dir), worker_identity())
    with session_scope(ctx.factory) as s:  # the job, taken by this process as its coordinator
        user = s.scalars(select(User).where(User.email == "alice@example.org")).one()
        job = Job(owner_id=user.id, dataset_id=dataset_id, budget_tier=BudgetTier.CUSTOM, budget_seconds=600,
                  state=JobState.QUEUED, queue=settings.default_queue)
        s.add(job)
        s.flush()
        job_id = job.id
        assert claim(s, job_id, ctx.owner, settings.lease_seconds).outcome is Outcome.CLAIMED
    with ctx.factory() as s:
        job, dataset = s.get_one(Job, job_id), s.get_one(Dataset, dataset_id)
    request = _trial(ctx, job, dataset)
    worker.wait_ready()

    with JobMonitor(ctx.factory, job_id, ctx.owner, settings.lease_seconds) as monitor:
        executor = CeleryExecutor(ctx, make_app(settings), job_id, 1, settings.default_queue, "coordinator",
                                  start_timeout_s=60, count=lambda _ours: 1)
        assert executor.free_slots() == 1
        executor.submit(request)
        (outcome,) = wait_for(executor.poll, 240, "the trial's outcome", interval=0.5)
        spent = monitor.elapsed()  # the coordinator's own seconds, as the runner ends the job with
        assert _end(ctx, job_id, JobState.CANCELLED, spent, note="the test's search ends here") == "cancelled"
    executor.discard_weights()

    assert outcome.result.status in ("completed", "stopped", "deadline"), (outcome, worker.log()[-3000:])
    assert outcome.result.epochs >= 1 and outcome.worker != "coordinator"  # trained on the other worker
    with ctx.factory() as s:
        row = s.scalars(select(TrialTask).where(TrialTask.job_id == job_id)).one()
        job = s.get_one(Job, job_id)
        quota = usage(s, s.get_one(User, job.owner_id), settings).device_seconds
    assert row.state is TrialState.DONE and row.started_at is not None and row.finished_at is not None
    took = (row.finished_at - row.started_at).total_seconds()  # from the worker taking the trial to its outcome
    assert took > 1.0
    assert row.device_seconds is not None and row.device_seconds >= took - 0.5  # the trial task recorded its time
    assert job.trial_seconds == pytest.approx(row.device_seconds, abs=1e-3)
    # the job's device-seconds are the coordinator's and the trial's, not the coordinator's alone
    assert job.device_seconds >= spent + took - 0.5
    assert job.device_seconds == pytest.approx(spent + row.device_seconds, abs=0.01)
    assert quota.used == round(job.device_seconds)  # what the owner's quota charges for the finished job
    engine.dispose()
