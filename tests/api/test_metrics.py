"""`GET /metrics`: requests by route template, status and latency; jobs, trials, device-seconds and queue depth; only
to the bearer of NETSYNTH_METRICS_TOKEN (404 without one), the database read at most every
NETSYNTH_METRICS_REFRESH_S."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
import redis
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from api.metrics import StoreCollector, exposition
from api.tasks import enqueue_synthesize
from infra.settings import Settings
from store.db import session_scope
from store.jobs import append_event, transition
from store.models import Candidate, CandidateStatus, JobState, TrialState, TrialTask
from tests.api.conftest import Account, assert_problem
from tests.services import unavailable
from tests.store.factories import make_job

ROOT = Path(__file__).resolve().parents[2]
JOB_ROUTE = "/api/v1/jobs/{job_id}"
TOKEN = "a-scrapers-token"
SCRAPER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(name="settings")
def scraped_settings(settings: Settings) -> Settings:
    """The API fixtures' settings with a metrics token, and the database read at every scrape."""
    return settings.model_copy(update={"metrics_token": TOKEN, "metrics_refresh_s": 0})


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the sample `name` with `labels` in an exposition (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


@pytest.mark.anyio
async def test_requests_are_counted_by_route_template(client: httpx.AsyncClient, account: Account) -> None:
    before = (await client.get("/metrics", headers=SCRAPER)).text
    ids = [uuid.uuid4() for _ in range(3)]
    for job_id in ids:
        assert (await client.get(f"/api/v1/jobs/{job_id}", headers=account.auth)).status_code == 404
    r = await client.get("/metrics", headers=SCRAPER)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    counted = {"route": JOB_ROUTE, "method": "GET", "status": "404"}
    assert sample(r.text, "netsynth_http_requests_total", **counted) - sample(
        before, "netsynth_http_requests_total", **counted) == 3
    latency = {"route": JOB_ROUTE, "method": "GET"}
    assert sample(r.text, "netsynth_http_request_duration_seconds_count", **latency) - sample(
        before, "netsynth_http_request_duration_seconds_count", **latency) == 3
    assert not any(str(job_id) in r.text for job_id in ids)  # raw paths never become labels
    assert sample(r.text, "netsynth_http_requests_total", route="/metrics", method="GET", status="200") >= 1
    schema = (await client.get("/api/v1/openapi.json")).json()
    assert "/metrics" not in schema["paths"]


@pytest.mark.anyio
async def test_job_trial_and_device_figures_reflect_the_rows(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], app: FastAPI
) -> None:
    with session_scope(factory) as s:
        queued = [make_job(s, account.user) for _ in range(2)]
        running, done = make_job(s, account.user), make_job(s, account.user)
        transition(running, JobState.RUNNING)
        transition(done, JobState.RUNNING)
        transition(done, JobState.SUCCEEDED)
        running.device_seconds, done.device_seconds = 12.5, 30.0
        for n in range(3):
            append_event(s, running, "candidate", {"n": n, "status": "proposed"})  # proposed, then trained
            append_event(s, running, "candidate", {"n": n, "status": "completed"})
        append_event(s, running, "progress")
        s.add_all([Candidate(job_id=done.id, genome={}, status=CandidateStatus.TRAINED),
                   Candidate(job_id=done.id, genome={}, status=CandidateStatus.FAILED),
                   TrialTask(job_id=running.id, attempt=1, trial_index=0, request={}, state=TrialState.RUNNING)])
    enqueue_synthesize(app.state.sender, queued[0])
    text = (await client.get("/metrics", headers=SCRAPER)).text
    assert [sample(text, "netsynth_jobs", state=state) for state in ("queued", "running", "succeeded", "failed")] == [
        2, 1, 1, 0]
    assert sample(text, "netsynth_device_seconds_total") == 42.5
    assert sample(text, "netsynth_trials_total") == 3
    assert sample(text, "netsynth_candidates", status="trained") == 1
    assert sample(text, "netsynth_candidates", status="failed") == 1
    assert sample(text, "netsynth_trial_tasks", state="running") == 1
    assert sample(text, "netsynth_queue_depth", queue="cpu") == 1
    assert sample(text, "netsynth_source_up", source="database") == 1


@pytest.mark.anyio
async def test_only_the_bearer_of_the_token_is_answered(client: httpx.AsyncClient) -> None:
    missing = assert_problem(await client.get("/metrics"), 401)
    assert missing["type"] == "urn:netsynth:problem:unauthenticated"
    wrong = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}x"})
    assert_problem(wrong, 401)
    assert wrong.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert_problem(await client.get("/metrics", headers={"Authorization": f"Basic {TOKEN}"}), 401)
    assert (await client.get("/metrics", headers=SCRAPER)).status_code == 200


@pytest.mark.anyio
async def test_without_a_token_setting_nothing_is_served(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"metrics_token": ""}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        for headers in ({}, {"Authorization": "Bearer "}, SCRAPER):
            assert_problem(await client.get("/metrics", headers=headers), 404)
    app.state.engine.dispose()


@pytest.mark.anyio
async def test_scrapes_between_two_reads_send_the_database_nothing(
    settings: Settings, account: Account, factory: sessionmaker[Session]
) -> None:
    """However often it is scraped, the database is read at most once every NETSYNTH_METRICS_REFRESH_S."""
    app = create_app(settings.model_copy(update={"metrics_refresh_s": 3600}))
    statements: list[str] = []
    event.listen(app.state.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        first = (await client.get("/metrics", headers=SCRAPER)).text
        assert statements, "the first scrape reads the database"
        statements.clear()
        with session_scope(factory) as s:
            make_job(s, account.user)
        for _ in range(5):
            again = await client.get("/metrics", headers=SCRAPER)
            assert sample(again.text, "netsynth_jobs", state="queued") == sample(first, "netsynth_jobs",
                                                                                  state="queued") == 0
    app.state.engine.dispose()
    assert statements == []


def test_the_store_figures_are_read_again_once_the_refresh_interval_has_passed(
    settings: Settings, account: Account, factory: sessionmaker[Session], app: FastAPI
) -> None:
    now = [100.0]
    store = StoreCollector(app.state.session_factory, settings.model_copy(update={"metrics_refresh_s": 30}),
                           clock=lambda: now[0])
    assert sample(exposition(store).decode(), "netsynth_jobs", state="queued") == 0
    with session_scope(factory) as s:
        make_job(s, account.user)
    now[0] += 29.9
    assert sample(exposition(store).decode(), "netsynth_jobs", state="queued") == 0  # the figures last read
    now[0] += 0.1
    assert sample(exposition(store).decode(), "netsynth_jobs", state="queued") == 1


def test_queue_depth_is_the_redis_list_length(settings: Settings, account: Account,
                                              factory: sessionmaker[Session]) -> None:
    url = "redis://127.0.0.1:6379/0"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        unavailable(f"no Redis at {url}: {exc}")
    queue = f"test-{uuid.uuid4().hex[:8]}"
    app = create_app(settings.model_copy(update={"broker_url": url, "default_queue": queue}))
    try:
        with session_scope(factory) as s:
            jobs = [make_job(s, account.user) for _ in range(2)]
        for job in jobs:
            job.queue = queue
            enqueue_synthesize(app.state.sender, job)
        text = exposition(StoreCollector(app.state.session_factory, app.state.settings)).decode()
        assert sample(text, "netsynth_queue_depth", queue=queue) == 2
        assert sample(text, "netsynth_source_up", source="broker") == 1
    finally:
        redis.Redis.from_url(url).delete(queue)
        app.state.engine.dispose()


def test_an_unreachable_broker_is_reported_not_fatal(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"}))
    text = exposition(StoreCollector(app.state.session_factory, app.state.settings)).decode()
    app.state.engine.dispose()
    assert sample(text, "netsynth_source_up", source="broker") == 0
    assert sample(text, "netsynth_source_up", source="database") == 1
    assert "netsynth_queue_depth" not in text


RECORD = "from api.metrics import record_request\nfor _ in range({n}): record_request('/r', 'GET', 200, 0.01)\n"
SCRAPE = ("from api.metrics import exposition\nfrom prometheus_client.registry import Collector\n"
          "class Empty(Collector):\n    def collect(self): return []\n"
          "print(exposition(Empty()).decode())\n")


def test_api_processes_add_up_in_multiprocess_mode(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def python(code: str) -> str:
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                              check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    python(RECORD.format(n=2))
    python(RECORD.format(n=3))
    text = python(SCRAPE)
    assert sample(text, "netsynth_http_requests_total", route="/r", status="200") == 5
    assert sample(text, "netsynth_http_request_duration_seconds_count", route="/r") == 5
