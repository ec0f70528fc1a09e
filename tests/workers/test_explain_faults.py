"""Explanation requests under faults, with real PostgreSQL, Redis and Celery worker processes serving the explain
queue: a pool process killed at every attempt (Celery redelivers the task each time) fails the request after its
last attempt instead of running it forever; one killed by the hard time limit (Celery acknowledges the task: nothing
is redelivered) is found by the workers' reaper and answered by its next attempt, not left running; one whose task
was never sent is sent by the reaper."""

from __future__ import annotations

import os
import signal
import time
import uuid

import numpy as np
from celery import Celery
from sqlalchemy import Engine
from sqlalchemy.orm import undefer

from infra.broker import EXPLAIN, celery_config, enqueue_explain
from infra.settings import Settings
from store.db import make_engine, make_session_factory, session_scope
from store.explanations import create_explanation
from store.models import ExplanationRequest, ExplanationState
from tests import nets
from tests.datasets import png_bytes
from tests.workers.service import WorkerProcess, wait_for

PIXELS = np.random.default_rng(7).integers(0, 256, (8, 8, 1), dtype=np.uint8)


def _asked(engine: Engine) -> uuid.UUID:
    """A queued request to explain an image with a real (tiny) network, committed; its task not sent yet."""
    factory = make_session_factory(engine)
    model = nets.insert_model(factory, None, nets.image_net())
    with session_scope(factory) as s:
        return create_explanation(s, model, "integrated-gradients", image=png_bytes(PIXELS), name="ant.png").id


def _row(engine: Engine, explanation_id: uuid.UUID) -> ExplanationRequest:
    with make_session_factory(engine)() as s:
        return s.get_one(ExplanationRequest, explanation_id, options=[undefer(ExplanationRequest.overlay)])


def _pool_pid_of_attempt(engine: Engine, explanation_id: uuid.UUID, attempt: int, timeout: float = 120) -> int:
    """The process id of the pool process running the request's attempt `attempt`, as soon as it has claimed it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = _row(engine, explanation_id)
        assert row.state is not ExplanationState.DONE, f"attempt {row.attempts} answered before it could be stopped"
        if row.state is ExplanationState.RUNNING and row.attempts == attempt and row.worker is not None:
            return int(row.worker.split(":")[1])
        time.sleep(0.01)
    raise AssertionError(f"attempt {attempt} did not start within {timeout:.0f} s: {_row(engine, explanation_id)}")


def _ended(engine: Engine, explanation_id: uuid.UUID) -> ExplanationRequest | None:
    row = _row(engine, explanation_id)
    return row if row.state in (ExplanationState.DONE, ExplanationState.FAILED) else None


def _sender(settings: Settings) -> Celery:
    return Celery("netsynth-test", config_source=celery_config(settings), set_as_current=False)


def test_a_request_whose_pool_process_dies_at_every_attempt_fails_after_its_last(
        pg_redis_settings: Settings, worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    engine = make_engine(settings.database_url)
    asked = _asked(engine)
    worker = WorkerProcess(settings, settings.blob_dir.parent / "worker.log",
                           queues=settings.explain_queue).wait_ready()
    worker_factory.append(worker)
    enqueue_explain(_sender(settings), str(asked), settings.explain_queue)
    for attempt in range(1, settings.explain_max_attempts + 1):
        pid = _pool_pid_of_attempt(engine, asked, attempt)
        os.kill(pid, signal.SIGSTOP)  # held still, then killed: out of memory on this input, every time
        os.kill(pid, signal.SIGKILL)
    row = wait_for(lambda: _ended(engine, asked), 120, "the request to end")
    assert row.state is ExplanationState.FAILED, worker.log()[-3000:]
    assert (row.reason, row.attempts) == ("worker-lost", settings.explain_max_attempts)
    assert f"not retried after {settings.explain_max_attempts} attempts" in str(row.error)
    assert "WorkerLostError" in worker.log()  # Celery saw each pool process die and redelivered its task
    assert row.worker is None and row.device_seconds >= 0
    engine.dispose()


def test_a_request_killed_at_its_hard_time_limit_is_reaped_and_answered(
        pg_redis_settings: Settings, worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    engine = make_engine(settings.database_url)
    asked = _asked(engine)
    worker = WorkerProcess(settings, settings.blob_dir.parent / "worker.log",
                           queues=settings.explain_queue).wait_ready()
    worker_factory.append(worker)
    # a hard time limit of 2 s, no soft one: its pool process is killed and its task acknowledged as failed
    _sender(settings).send_task(EXPLAIN, args=[str(asked)], queue=settings.explain_queue, time_limit=2)
    os.kill(_pool_pid_of_attempt(engine, asked, 1), signal.SIGSTOP)  # stuck (in native code, say) past its limit
    wait_for(lambda: "Hard time limit (2" in worker.log(), 60, "Celery's hard time limit")
    # nothing redelivers it: the reaper (in the worker, every half lease) finds its heartbeat stopped, queues it
    # again and sends it to the explain queue, where a new pool process answers it
    row = wait_for(lambda: _ended(engine, asked), 180, "the reaper and the next attempt to answer it")
    assert row.state is ExplanationState.DONE, (row.reason, row.error, worker.log()[-3000:])
    assert row.attempts == 2 and row.attribution is not None and row.overlay is not None
    assert "queued again for attempt 2" in worker.log()
    engine.dispose()


def test_a_request_never_sent_is_sent_by_the_reaper_and_answered(
        pg_redis_settings: Settings, worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings.model_copy(update={"republish_after_s": 2.0})
    engine = make_engine(settings.database_url)
    asked = _asked(engine)  # committed, its task never published: the API stopped between the two
    worker = WorkerProcess(settings, settings.blob_dir.parent / "worker.log",
                           queues=settings.explain_queue).wait_ready()
    worker_factory.append(worker)
    row = wait_for(lambda: _ended(engine, asked), 120, "the reaper to send it and a worker to answer it")
    assert (row.state, row.attempts) == (ExplanationState.DONE, 1), worker.log()[-3000:]
    assert row.published_at is not None and "its task was published again" in worker.log()
    engine.dispose()
