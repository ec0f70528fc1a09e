"""`/jobs`: submitting publishes a real task message, budgets and bodies are validated, jobs are owner-scoped."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from api.routes.jobs import BROKER_DOWN
from domain.rules import DEFAULT_TOLERANCE
from infra.broker import SYNTHESIZE, filesystem_dir, time_limits
from infra.settings import Settings
from store.apikeys import create_api_key
from store.base import utcnow
from store.db import session_scope
from store.models import DatasetStatus, Job, JobEvent, JobState, TrainedModel, User
from tests.api.conftest import Account, assert_problem
from tests.store.factories import make_job, make_user, ready_dataset, walk_job

pytestmark = pytest.mark.anyio

UNREACHABLE_BROKER = "redis://127.0.0.1:1/0"


@pytest.fixture
def broker_dir(settings: Settings) -> Path:
    """The folder of the test settings' filesystem broker."""
    folder = filesystem_dir(settings.broker_url)
    assert folder is not None
    return folder


def _messages(broker_dir: Path) -> list[dict[str, Any]]:
    """The task messages the filesystem transport wrote, one file each."""
    return [json.loads(p.read_text()) | {"file": p.name} for p in sorted(broker_dir.glob("*.msg"))]


def _events(factory: sessionmaker[Session], job_id: uuid.UUID) -> list[JobEvent]:
    with factory() as s:
        return list(s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.seq)))


def _job(factory: sessionmaker[Session], job_id: uuid.UUID | str) -> Job:
    with factory() as s:
        job = s.get(Job, uuid.UUID(str(job_id)))
        assert job is not None
        return job


def _job_in(factory: sessionmaker[Session], owner: User, state: JobState) -> uuid.UUID:
    """A job of `owner` walked from queued to `state` through the state machine."""
    with session_scope(factory) as s:
        job = make_job(s, owner)
        walk_job(job, state, error="boom")
        return job.id


async def test_submit_commits_the_job_and_publishes_a_synthesize_message(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], broker_dir: Path
) -> None:
    ds = ready_dataset(factory, account.user)
    body = {"dataset_id": str(ds), "budget": "medium", "queue": "gpu",
            "constraints": {"max_params": 50_000, "max_latency_ms": 2.5}}
    r = await client.post("/api/v1/jobs", json=body, headers=account.auth)
    assert r.status_code == 201, r.text
    out = r.json()
    assert r.headers["location"] == f"/api/v1/jobs/{out['id']}"
    assert out["dataset_id"] == str(ds)
    assert (out["budget_tier"], out["budget_seconds"], out["queue"]) == ("medium", 5 * 3600, "gpu")
    assert out["constraints"] == {"max_params": 50_000, "max_latency_ms": 2.5}
    assert (out["state"], out["cancel_requested"], out["model_ids"], out["attempts"]) == ("queued", False, [], 0)

    job = _job(factory, out["id"])
    assert (job.state, job.budget_seconds, job.queue) == (JobState.QUEUED, 5 * 3600, "gpu")
    [queued] = _events(factory, job.id)
    assert (queued.kind, queued.payload) == ("queued", {"budget_tier": "medium", "budget_seconds": 5 * 3600})

    [message] = _messages(broker_dir)
    assert message["headers"]["task"] == SYNTHESIZE
    assert json.loads(message["headers"]["argsrepr"].replace("'", '"')) == [out["id"]]
    assert message["properties"]["delivery_info"]["routing_key"] == "gpu"
    assert message["file"].endswith(".gpu.msg")
    soft, hard = time_limits(5 * 3600)
    assert message["headers"]["timelimit"] == [hard, soft]


async def test_custom_seconds_and_the_default_queue(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], broker_dir: Path
) -> None:
    ds = ready_dataset(factory, account.user)
    r = await client.post("/api/v1/jobs", json={"dataset_id": str(ds), "budget": 900}, headers=account.auth)
    assert r.status_code == 201, r.text
    out = r.json()
    assert (out["budget_tier"], out["budget_seconds"], out["queue"], out["constraints"]) == ("custom", 900, "cpu", {})
    [message] = _messages(broker_dir)
    assert message["properties"]["delivery_info"]["routing_key"] == "cpu"


@pytest.mark.parametrize(("sent", "stored"), [(None, DEFAULT_TOLERANCE), (0, 0.0), (0.02, 0.02), (0.2, 0.2)])
async def test_the_compression_tolerance_is_stored_and_shown(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], broker_dir: Path,
    sent: float | None, stored: float,
) -> None:
    body: dict[str, Any] = {"dataset_id": str(ready_dataset(factory, account.user))}
    if sent is not None:
        body["tolerance"] = sent
    r = await client.post("/api/v1/jobs", json=body, headers=account.auth)
    assert r.status_code == 201, r.text
    assert r.json()["tolerance"] == stored
    assert _job(factory, r.json()["id"]).tolerance == stored
    assert (await client.get(f"/api/v1/jobs/{r.json()['id']}", headers=account.auth)).json()["tolerance"] == stored


@pytest.mark.parametrize(("samples", "tier"), [
    (500, "low"), (10_000, "low"), (50_000, "medium"), (100_000, "medium"), (100_001, "high"), (500_000, "high"),
])
async def test_an_omitted_budget_follows_the_dataset_size(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], samples: int, tier: str
) -> None:
    ds = ready_dataset(factory, account.user, sample_count=samples)
    r = await client.post("/api/v1/jobs", json={"dataset_id": str(ds)}, headers=account.auth)
    assert r.status_code == 201, r.text
    assert r.json()["budget_tier"] == tier
    assert r.json()["budget_seconds"] == {"low": 2, "medium": 5, "high": 16}[tier] * 3600


@pytest.mark.parametrize("patch", [
    {"budget": "huge"}, {"budget": "custom"}, {"budget": "600"}, {"budget": 9}, {"budget": 16 * 3600 * 4 + 1},
    {"budget": -5}, {"budget": 60.5}, {"budget": True}, {"priority": 1},
    {"constraints": {"max_params": 0}}, {"constraints": {"max_params": -1}}, {"constraints": {"max_params": 1.5}},
    {"constraints": {"max_model_bytes": 0}}, {"constraints": {"max_latency_ms": -0.5}},
    {"constraints": {"max_latency_ms": 0}}, {"constraints": {"max_flops": 10}}, {"constraints": [1]},
    {"queue": "tpu"}, {"dataset_id": "not-a-uuid"}, {"dataset_id": None},
    {"tolerance": -0.001}, {"tolerance": 0.21}, {"tolerance": 1}, {"tolerance": "0.01"}, {"tolerance": True},
])
async def test_invalid_bodies_are_422_and_create_nothing(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], patch: dict[str, Any]
) -> None:
    body = {"dataset_id": str(ready_dataset(factory, account.user)), **patch}
    problem = assert_problem(await client.post("/api/v1/jobs", json=body, headers=account.auth), 422)
    assert problem["type"] == "urn:netsynth:problem:validation-error"
    with factory() as s:
        assert s.scalars(select(Job)).all() == []


@pytest.mark.parametrize("raw", ['{"dataset_id": "%s", "constraints": {"max_latency_ms": NaN}}', '{"dataset_id": "%s"',
                                 '{"dataset_id": "%s", "constraints": {"max_latency_ms": Infinity}}',
                                 '{"dataset_id": "%s", "tolerance": NaN}'])
async def test_non_finite_numbers_and_broken_json_are_422(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], raw: str
) -> None:
    content = raw % ready_dataset(factory, account.user)
    r = await client.post("/api/v1/jobs", content=content, headers=account.auth | {"content-type": "application/json"})
    assert_problem(r, 422)


async def test_another_users_dataset_is_404_like_a_missing_one(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    with session_scope(factory) as s:
        them = make_user(s)
    theirs = ready_dataset(factory, them)
    missing = uuid.uuid4()
    for ds in (theirs, missing):
        r = await client.post("/api/v1/jobs", json={"dataset_id": str(ds)}, headers=account.auth)
        assert assert_problem(r, 404)["detail"] == f"no dataset {ds}"
    with factory() as s:
        assert s.scalars(select(Job)).all() == []


@pytest.mark.parametrize("status", [DatasetStatus.UPLOADED, DatasetStatus.VALIDATING, DatasetStatus.REJECTED])
async def test_a_dataset_that_is_not_ready_is_409(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], status: DatasetStatus
) -> None:
    ds = ready_dataset(factory, account.user, status=status)
    problem = assert_problem(await client.post("/api/v1/jobs", json={"dataset_id": str(ds)}, headers=account.auth), 409)
    assert status.value in str(problem["detail"])


async def test_an_unreachable_broker_is_503_and_the_job_fails_instead_of_staying_queued(
    settings: Settings, account: Account, factory: sessionmaker[Session]
) -> None:
    ds = ready_dataset(factory, account.user)
    app = create_app(settings.model_copy(update={"broker_url": UNREACHABLE_BROKER}))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.post("/api/v1/jobs", json={"dataset_id": str(ds)}, headers=account.auth)
    app.state.engine.dispose()
    assert assert_problem(r, 503)["type"] == "urn:netsynth:problem:unavailable"
    with factory() as s:
        [job] = s.scalars(select(Job)).all()
    assert (job.state, job.error) == (JobState.FAILED, BROKER_DOWN)
    assert (job.started_at, job.finished_at is not None) == (None, True)
    assert [(e.kind, e.payload) for e in _events(factory, job.id)] == [
        ("queued", {"budget_tier": "low", "budget_seconds": 7200}), ("failed", {"error": BROKER_DOWN})]


async def test_list_is_newest_first_with_paging_and_filters(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    states = [JobState.SUCCEEDED, JobState.RUNNING, JobState.QUEUED, JobState.RUNNING]
    ids = [_job_in(factory, account.user, state) for state in states]
    start = utcnow()
    with session_scope(factory) as s:
        for age, job_id in enumerate(reversed(ids)):
            job = s.get(Job, job_id)
            assert job is not None
            job.created_at = start - timedelta(minutes=age)
        make_job(s)  # someone else's
        dataset_of_first = s.get(Job, ids[0]).dataset_id  # type: ignore[union-attr]
    newest_first = [str(i) for i in reversed(ids)]

    async def listed(**params: Any) -> list[str]:
        r = await client.get("/api/v1/jobs", params=params, headers=account.auth)
        assert r.status_code == 200, r.text
        return [job["id"] for job in r.json()]

    assert await listed() == newest_first
    assert await listed(limit=2) == newest_first[:2]
    assert await listed(limit=2, offset=1) == newest_first[1:3]
    assert await listed(offset=10) == []
    assert await listed(state="running") == [str(ids[3]), str(ids[1])]
    assert await listed(state="cancelled") == []
    assert await listed(dataset_id=str(dataset_of_first)) == [str(ids[0])]


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 201}, {"offset": -1}, {"offset": 10**30},
                                    {"state": "sleeping"}, {"dataset_id": "nope"}, {"limit": "x"}])
async def test_bad_list_parameters_are_422(client: httpx.AsyncClient, account: Account, params: dict[str, Any]) -> None:
    assert_problem(await client.get("/api/v1/jobs", params=params, headers=account.auth), 422)


async def test_another_user_sees_none_of_the_jobs(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    job_id = _job_in(factory, account.user, JobState.QUEUED)
    with session_scope(factory) as s:
        other = {"Authorization": f"Bearer {create_api_key(s, make_user(s)).plaintext}"}
    r = await client.get("/api/v1/jobs", headers=other)
    assert (r.status_code, r.json()) == (200, [])
    missing = uuid.uuid4()
    for method, suffix in (("GET", ""), ("POST", "/cancel"), ("GET", "/events")):
        for target in (job_id, missing):
            r = await client.request(method, f"/api/v1/jobs/{target}{suffix}", headers=other)
            assert assert_problem(r, 404)["detail"] == f"no job {target}"
    assert _job(factory, job_id).state is JobState.QUEUED


async def test_read_shows_the_job_and_its_models_ordered_by_variant(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    job_id = _job_in(factory, account.user, JobState.SUCCEEDED)
    with session_scope(factory) as s:
        models = {variant: TrainedModel(job_id=job_id, spec={}, variant=variant, weights=b"w", onnx=b"o",
                                         param_count=10, weights_bytes=40) for variant in ("dense", "compressed")}
        s.add_all(models.values())
        s.flush()
        expected = [str(models["dense"].id), str(models["compressed"].id)]  # the dense model first
    r = await client.get(f"/api/v1/jobs/{job_id}", headers=account.auth)
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["id"], out["state"], out["progress"], out["model_ids"]) == (str(job_id), "succeeded", 1.0, expected)
    assert out["models"] == [{"id": expected[0], "variant": "dense"}, {"id": expected[1], "variant": "compressed"}]
    assert out["started_at"] is not None and out["finished_at"] is not None
    assert (await client.get("/api/v1/jobs", headers=account.auth)).json()[0]["model_ids"] == expected
    assert_problem(await client.get("/api/v1/jobs/not-a-uuid", headers=account.auth), 422)


@pytest.mark.parametrize(("start", "after", "requested", "logged"), [
    (JobState.QUEUED, JobState.CANCELLED, False, [("cancelled", {"before_start": True})]),  # cancelled at once
    (JobState.RUNNING, JobState.RUNNING, True, [("cancel_requested", {})]),  # its worker is asked to stop
    (JobState.CANCELLED, JobState.CANCELLED, False, []),
])
async def test_cancel_is_idempotent_and_stops_queued_jobs_now_and_running_ones_through_their_worker(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session],
    start: JobState, after: JobState, requested: bool, logged: list[tuple[str, dict[str, Any]]],
) -> None:
    job_id = _job_in(factory, account.user, start)
    for _ in range(2):
        r = await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=account.auth)
        assert r.status_code == 200, r.text
        assert (r.json()["state"], r.json()["cancel_requested"]) == (after.value, requested)
    job = _job(factory, job_id)
    assert (job.state, job.cancel_requested_at is not None) == (after, requested)
    assert [(e.kind, e.payload) for e in _events(factory, job_id)] == logged


@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.FAILED])
async def test_cancelling_a_finished_job_is_409(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], state: JobState
) -> None:
    job_id = _job_in(factory, account.user, state)
    problem = assert_problem(await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=account.auth), 409)
    assert problem["detail"] == f"job already {state.value}"
    assert _job(factory, job_id).state is state
    assert _events(factory, job_id) == []


UNKNOWN_JOB = uuid.UUID("8c1f0e3a-5b7d-4e2a-9f61-2d4c8b0a7e15")
"""A job id no test creates (fixed, so the test ids are the same in every collection)."""


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/api/v1/jobs"), ("GET", "/api/v1/jobs"), ("GET", f"/api/v1/jobs/{UNKNOWN_JOB}"),
    ("POST", f"/api/v1/jobs/{UNKNOWN_JOB}/cancel"), ("GET", f"/api/v1/jobs/{UNKNOWN_JOB}/events"),
])
async def test_every_route_needs_an_api_key(client: httpx.AsyncClient, method: str, path: str) -> None:
    assert_problem(await client.request(method, path, json={}), 401)
