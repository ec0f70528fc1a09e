"""Worker logs: with JSON logging, the lines of a trial sub-task carry the `job_id` of the job the trial is for."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from celery import signals

from infra.broker import TRIAL
from infra.logs import configure_worker_logging, setup_logging
from infra.settings import Settings
from store.blobs import FileBlobStore
from store.db import make_engine, make_session_factory, session_scope
from store.migrate import upgrade
from store.models import JobState, TrialTask
from synthesis.executor import TrialRequest
from tests.store.factories import make_job
from workers.context import Context
from workers.subtask import run_trial_task


def test_a_trial_sub_task_logs_the_job_id_of_its_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    upgrade(url)
    engine = make_engine(url)
    settings = Settings(database_url=url, blob_dir=tmp_path / "blobs", broker_url=f"filesystem://{tmp_path}/b")
    ctx = Context(settings, make_session_factory(engine), FileBlobStore(settings.blob_dir), "w1")
    request = TrialRequest(4, {}, {}, {"time_limit_s": 5.0}, {1: []}, 4, 3, time.time() + 30, 10)
    with session_scope(ctx.factory) as s:
        job = make_job(s)  # its dataset's blob does not exist: the trial fails (and logs why) loading its data
        job.state = JobState.RUNNING
        row = TrialTask(job_id=job.id, attempt=1, trial_index=4, request=request.to_dict())
        s.add(row)
        s.flush()
        job_id, row_id = str(job.id), str(row.id)
    configure_worker_logging("json")
    try:
        signals.setup_logging.send(sender=None, loglevel=logging.INFO, logfile=None, format="", colorize=False)
        task = type("Task", (), {"name": TRIAL})()
        signals.task_prerun.send(sender=task, task_id="t-2", task=task, args=[row_id], kwargs={})
        assert run_trial_task(ctx, row.id, "w1") == "failed"
        logging.getLogger("workers.tasks").info("between trials")
        signals.task_postrun.send(sender=task, task_id="t-2", task=task, args=[row_id], kwargs={}, retval=None)
    finally:
        setup_logging("text")
        configure_worker_logging("text")
        engine.dispose()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    failed = next(line for line in lines if line["logger"] == "workers.subtask")
    assert failed["message"] == f"trial 4 of job {job_id} failed"
    assert (failed["job_id"], failed["trial_task_id"], failed["task_id"]) == (job_id, row_id, "t-2")
    after = next(line for line in lines if line["message"] == "between trials")
    assert after["trial_task_id"] == row_id and "job_id" not in after  # only while the trial ran
