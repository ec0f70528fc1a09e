"""Structured logs: NETSYNTH_LOG_FORMAT=json gives one JSON object per line, with request_id and job_id."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from celery import signals
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from infra.broker import SYNTHESIZE
from infra.logs import configure_worker_logging, log_context, setup_logging
from infra.settings import Settings
from store.db import session_scope
from tests.api.conftest import Account
from tests.store.factories import make_job


@pytest.fixture
def logged(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The lines written to stderr so far, each parsed as JSON (a line that does not parse fails the test); JSON
    logging is undone afterwards."""
    yield lambda: [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    setup_logging("text")
    configure_worker_logging("text")


Logged = Callable[[], list[dict[str, Any]]]


@pytest.mark.anyio
async def test_a_request_logs_json_with_its_request_id_and_job_id(
    settings: Settings, account: Account, factory: sessionmaker[Session], logged: Logged
) -> None:
    app = create_app(settings.model_copy(update={"log_format": "json"}))

    @app.get("/test/{job_id}")
    def inside(job_id: str) -> None:  # a handler run in the thread pool, as the API's own are
        logging.getLogger("tests.inside").warning("handling %s", job_id)

    with session_scope(factory) as s:
        job_id = str(make_job(s, account.user).id)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        read = await client.get(f"/api/v1/jobs/{job_id}", headers=account.auth)
        handled = await client.get("/test/abc", headers={"X-Request-ID": "from-the-proxy.1"})
        refused = await client.get("/test/abc", headers={"X-Request-ID": "bad id\twith spaces"})
    app.state.engine.dispose()
    assert read.status_code == 200
    lines = logged()
    access = [line for line in lines if line["logger"] == "api.access"]
    first = access[0]
    assert first["request_id"] == read.headers["X-Request-ID"]
    assert len(read.headers["X-Request-ID"]) == 32
    assert (first["job_id"], first["status"], first["route"], first["method"]) == (
        job_id, 200, "/api/v1/jobs/{job_id}", "GET")
    assert {"time", "level", "message", "duration_ms"} <= first.keys()
    inner = next(line for line in lines if line["logger"] == "tests.inside")
    assert (inner["request_id"], inner["job_id"], inner["message"]) == ("from-the-proxy.1", "abc", "handling abc")
    assert handled.headers["X-Request-ID"] == "from-the-proxy.1"
    assert refused.headers["X-Request-ID"] != "bad id\twith spaces"
    assert access[-1]["request_id"] == refused.headers["X-Request-ID"]


@pytest.mark.anyio
async def test_an_unexpected_error_answers_with_its_request_id_and_logs_its_traceback_only(
    settings: Settings, logged: Logged
) -> None:
    app = create_app(settings.model_copy(update={"log_format": "json"}))

    @app.get("/api/v1/boom")
    def boom() -> None:
        raise RuntimeError("secret connection string postgres://admin:hunter2@db")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        sent = await client.get("/api/v1/boom", headers={"X-Request-ID": "from-the-proxy.2"})
        fresh = await client.get("/api/v1/boom")
    app.state.engine.dispose()
    for r in (sent, fresh):
        assert r.status_code == 500 and r.headers["content-type"] == "application/problem+json"
        assert r.json()["detail"] == "the server hit an unexpected error"
        assert "Traceback" not in r.text and "hunter2" not in r.text and "RuntimeError" not in r.text
    assert sent.headers["X-Request-ID"] == "from-the-proxy.2" and len(fresh.headers["X-Request-ID"]) == 32
    lines = logged()
    (error, _) = [line for line in lines if line["logger"] == "api.errors"]
    assert error["request_id"] == "from-the-proxy.2" and "RuntimeError: secret" in error["exc"]
    access = [line for line in lines if line["logger"] == "api.access"]
    assert [(a["request_id"], a["status"]) for a in access] == [("from-the-proxy.2", 500),
                                                               (fresh.headers["X-Request-ID"], 500)]


def test_text_format_leaves_logging_alone(settings: Settings, logged: Logged) -> None:
    before = list(logging.getLogger().handlers)
    create_app(settings).state.engine.dispose()
    assert logging.getLogger().handlers == before


def test_exceptions_and_extra_fields_are_json_too(logged: Logged) -> None:
    setup_logging("json")
    log = logging.getLogger("tests.logs")
    with log_context(job_id="j1", request_id=lambda: None):
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("failed", extra={"attempt": 2})
    setup_logging("json")  # again: still one handler, one line per record
    log.warning("once")
    failed, once = logged()
    assert (failed["level"], failed["message"], failed["job_id"], failed["attempt"]) == ("ERROR", "failed", "j1", 2)
    assert "request_id" not in failed  # a field whose function gives None is left out
    assert "ValueError: boom" in failed["exc"]
    assert once["message"] == "once" and "job_id" not in once


def test_a_worker_logs_json_with_the_job_id_of_its_task(logged: Logged) -> None:
    configure_worker_logging("json")
    signals.setup_logging.send(sender=None, loglevel=logging.INFO, logfile=None, format="", colorize=False)
    job_id, task = str(uuid.uuid4()), type("Task", (), {"name": SYNTHESIZE})()
    log = logging.getLogger("workers.runner")
    signals.task_prerun.send(sender=task, task_id="t-1", task=task, args=[job_id], kwargs={})
    log.info("training")
    signals.task_postrun.send(sender=task, task_id="t-1", task=task, args=[job_id], kwargs={}, retval=None)
    log.info("idle")
    training, idle = logged()
    assert (training["message"], training["job_id"], training["task_id"]) == ("training", job_id, "t-1")
    assert "job_id" not in idle
