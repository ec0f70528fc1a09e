"""Search trials as Celery sub-tasks: on two real workers a job trains candidates on both; on one it stays
in-process; a sub-task no worker takes fails its candidate, never the job."""

from __future__ import annotations

import time
import uuid

import httpx
from sqlalchemy import select

from infra.settings import Settings
from store.blobs import FileBlobStore
from store.db import make_engine, make_session_factory, session_scope
from store.models import BudgetTier, Candidate, Dataset, Job, JobState, Modality, TrialState, TrialTask, User
from synthesis.executor import TrialRequest
from tests.workers.conftest import Digits, make_keys
from tests.workers.service import ApiServer, WorkerProcess, wait_for
from workers.app import make_app
from workers.context import Context
from workers.executor import CeleryExecutor
from workers.subtask import run_trial_task

V1 = "/api/v1"


def _run_job(settings: Settings, digits: Digits, budget: int) -> tuple[dict[str, object], list[dict[str, object]]]:
    keys = make_keys(settings.database_url)
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        with digits.zip_path.open("rb") as f:
            dataset = client.post(f"{V1}/datasets", headers=keys.alice, files={"file": ("digits.zip", f)}).json()
        r = client.post(f"{V1}/jobs", headers=keys.alice, json={"dataset_id": dataset["id"], "budget": budget})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]

        def ended() -> dict[str, object] | None:
            job: dict[str, object] = client.get(f"{V1}/jobs/{job_id}", headers=keys.alice).json()
            return job if job["state"] in ("succeeded", "failed", "cancelled") else None

        job = wait_for(ended, budget * 4 + 120, "the job to end", interval=1.0)
        candidates = client.get(f"{V1}/jobs/{job_id}/candidates", headers=keys.alice).json()
    return job, candidates


def _trial_rows(settings: Settings) -> list[TrialTask]:
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as s:
            return list(s.scalars(select(TrialTask)))
    finally:
        engine.dispose()


def test_two_workers_train_candidates_in_parallel(pg_redis_settings: Settings, digits: Digits,
                                                  worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    folder = settings.blob_dir.parent
    worker_factory.extend(WorkerProcess(settings, folder / f"worker{i}.log") for i in range(2))
    for worker in worker_factory:
        worker.wait_ready()
    job, candidates = _run_job(settings, digits, budget=150)  # an image search has a fifth of it: 30 s
    assert job["state"] == "succeeded", (job, [w.log()[-3000:] for w in worker_factory])
    indices = [int(c["cost"]["index"]) for c in candidates]  # type: ignore[index]
    assert indices == list(range(len(indices)))  # the search log is complete: every candidate stored once
    trained = [c for c in candidates if c["metrics"]["curve"]]  # type: ignore[index]
    workers = {c["cost"]["worker"] for c in trained}  # type: ignore[index]
    assert len(workers) >= 2, candidates
    rows = _trial_rows(settings)
    assert rows and {r.trial_index for r in rows} <= set(indices)
    assert all(r.state in (TrialState.DONE, TrialState.CANCELLED) for r in rows)
    assert all(r.weights_key is None for r in rows)  # stored weights are discarded after the search


def test_one_worker_trains_everything_in_process(pg_redis_settings: Settings, digits: Digits,
                                                 worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    worker_factory.append(WorkerProcess(settings, settings.blob_dir.parent / "worker.log").wait_ready())
    job, candidates = _run_job(settings, digits, budget=30)
    assert job["state"] == "succeeded", (job, worker_factory[0].log()[-3000:])
    assert not _trial_rows(settings)  # no sub-task was sent
    assert len({c["cost"]["worker"] for c in candidates if c["metrics"]["curve"]}) == 1  # type: ignore[index]


def _running_job(ctx: Context) -> uuid.UUID:
    with session_scope(ctx.factory) as s:
        user = User(email="carol@example.org")
        s.add(user)
        s.flush()
        dataset = Dataset(owner_id=user.id, name="d", modality=Modality.IMAGE, checksum="0" * 64, blob_key="none")
        s.add(dataset)
        s.flush()
        job = Job(owner_id=user.id, dataset_id=dataset.id, budget_tier=BudgetTier.CUSTOM, budget_seconds=60,
                  state=JobState.RUNNING)
        s.add(job)
        s.flush()
        return job.id


def test_a_sub_task_no_worker_takes_fails_its_candidate_only(pg_redis_settings: Settings) -> None:
    settings = pg_redis_settings
    engine = make_engine(settings.database_url)
    ctx = Context(settings, make_session_factory(engine), FileBlobStore(settings.blob_dir), "coordinator")
    job_id = _running_job(ctx)
    # the executor believes one process is idle, but nobody serves this queue
    executor = CeleryExecutor(ctx, make_app(settings), job_id, 1, f"nobody-{uuid.uuid4().hex[:6]}", "coord",
                              start_timeout_s=1.0, count=lambda _ours: 1)
    assert executor.free_slots() == 1
    request = TrialRequest(3, {}, {}, {"time_limit_s": 5.0}, {1: []}, 4, 3, time.time() + 30, 10)
    executor.submit(request)
    assert executor.free_slots() == 0 and executor.poll() == []
    time.sleep(1.5)
    (report,) = executor.poll()
    assert report.index == 3 and report.result.status == "failed"
    assert "no worker took the sub-task" in report.result.reason
    (row,) = _rows(ctx)
    assert row.state is TrialState.CANCELLED
    # the late delivery of the message does nothing (the search gave the trial up), and nothing is reported twice
    assert run_trial_task(ctx, row.id, "late-worker") == "skipped"
    assert executor.poll() == [] and _rows(ctx)[0].worker is None
    # a sub-task that fails on its worker (here: it cannot load the job's data) reports a failed trial
    executor.submit(TrialRequest(4, {}, {}, {"time_limit_s": 5.0}, {1: []}, 4, 3, time.time() + 30, 10))
    new = next(r for r in _rows(ctx) if r.trial_index == 4)
    assert run_trial_task(ctx, new.id, "w2") == "failed"
    (failed,) = executor.poll()
    assert failed.index == 4 and failed.result.status == "failed" and failed.result.reason and failed.worker == "w2"
    executor.cancel()
    with session_scope(ctx.factory) as s:
        assert s.get_one(Job, job_id).state is JobState.RUNNING  # the job itself is untouched
        assert s.scalars(select(Candidate)).first() is None
    engine.dispose()


def _rows(ctx: Context) -> list[TrialTask]:
    with ctx.factory() as s:
        return list(s.scalars(select(TrialTask).order_by(TrialTask.trial_index)))
