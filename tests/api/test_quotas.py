"""Quotas over the API: `GET /me` shows usage against each; over one, a job or an upload is a 429 problem with the
quota's `reason` and what would free it, and nothing is created."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

import store.quotas
from infra.settings import Settings
from store.db import session_scope
from store.jobs import transition
from store.models import Job, JobState, User
from store.quotas import set_quota
from tests.api.conftest import Account, assert_problem, at_once
from tests.api.test_datasets import dataset_rows, files_left, upload
from tests.datasets import digits_arrays, write_image_zip
from tests.store.factories import make_job, ready_dataset

pytestmark = pytest.mark.anyio


def _override(factory: sessionmaker[Session], account: Account, **limits: int | None) -> None:
    with session_scope(factory) as s:
        set_quota(s.get_one(User, account.user.id), limits)


def _jobs(factory: sessionmaker[Session]) -> int:
    with factory() as s:
        return int(s.scalar(select(func.count()).select_from(Job)) or 0)


async def test_me_shows_usage_against_each_quota(client: httpx.AsyncClient, account: Account,
                                                 factory: sessionmaker[Session], settings: Settings) -> None:
    with session_scope(factory) as s:
        user = s.get_one(User, account.user.id)
        job = make_job(s, user)  # with a dataset of 1234 bytes
        job.budget_seconds = 900
        done = make_job(s, user)
        transition(done, JobState.RUNNING)
        done.device_seconds = 120.0
        transition(done, JobState.SUCCEEDED)
        set_quota(user, {"storage_bytes": 10_000})
    r = await client.get("/api/v1/me", headers=account.auth)
    assert r.status_code == 200, r.text
    assert r.json()["quotas"] == {
        "active_jobs": {"used": 1, "limit": settings.max_active_jobs_per_user,
                        "left": settings.max_active_jobs_per_user - 1, "custom": False},
        "device_seconds": {"used": 900 + 120, "limit": settings.device_seconds_per_30_days,
                           "left": settings.device_seconds_per_30_days - 1020, "custom": False},
        "storage_bytes": {"used": 2 * 1234, "limit": 10_000, "left": 10_000 - 2 * 1234, "custom": True},
    }


async def test_a_job_past_the_active_jobs_quota_is_429_until_one_is_cancelled(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    _override(factory, account, active_jobs=1)
    body = {"dataset_id": str(ready_dataset(factory, account.user)), "budget": 60}
    first = await client.post("/api/v1/jobs", json=body, headers=account.auth)
    assert first.status_code == 201, first.text
    problem = assert_problem(await client.post("/api/v1/jobs", json=body, headers=account.auth), 429)
    assert problem["type"] == "urn:netsynth:problem:quota-exceeded"
    assert problem["reason"] == "quota-active-jobs"
    assert "cancel one" in str(problem["detail"])
    assert _jobs(factory) == 1
    await client.post(f"/api/v1/jobs/{first.json()['id']}/cancel", headers=account.auth)
    assert (await client.post("/api/v1/jobs", json=body, headers=account.auth)).status_code == 201


def test_concurrent_jobs_of_one_user_are_checked_one_after_the_other(
    settings: Settings, account: Account, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five job creations at once, with room for one: exactly one is created, on SQLite as on PostgreSQL. Each
    request waits a moment between its quota check and its insert, so without the checks serialised every request
    would pass its check before any had inserted."""
    _override(factory, account, active_jobs=1)
    body = {"dataset_id": str(ready_dataset(factory, account.user)), "budget": 60}
    checked = store.quotas.check_job

    def check_then_wait(*args: Any, **kwargs: Any) -> None:
        checked(*args, **kwargs)
        time.sleep(0.3)

    monkeypatch.setattr("api.routes.jobs.check_job", check_then_wait)
    assert at_once(settings, account, 5, "/api/v1/jobs", body) == [201, 429, 429, 429, 429]
    assert _jobs(factory) == 1


async def test_a_budget_past_the_device_seconds_left_is_429(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session]
) -> None:
    _override(factory, account, device_seconds=1_000)
    dataset = str(ready_dataset(factory, account.user))
    r = await client.post("/api/v1/jobs", json={"dataset_id": dataset, "budget": 1_001}, headers=account.auth)
    problem = assert_problem(r, 429)
    assert problem["reason"] == "quota-device-seconds"
    assert "at most 1000" in str(problem["detail"])
    assert _jobs(factory) == 0
    r = await client.post("/api/v1/jobs", json={"dataset_id": dataset, "budget": 1_000}, headers=account.auth)
    assert r.status_code == 201, r.text


async def test_an_upload_past_the_storage_quota_is_429_and_leaves_no_row_and_no_file(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    x, y = digits_arrays()
    path = write_image_zip(tmp_path / "digits.zip", x[:100], y[:100], root="digits")
    size = path.stat().st_size
    _override(factory, account, storage_bytes=size - 1)
    problem = assert_problem(await upload(client, account, path), 429)
    assert problem["reason"] == "quota-storage"
    assert f"upload of {size} bytes" in str(problem["detail"])
    assert dataset_rows(factory) == 0
    assert files_left(settings) == []  # neither a stored blob nor the staged upload
    _override(factory, account, storage_bytes=size)
    assert (await upload(client, account, path)).status_code == 201
    problem = assert_problem(await upload(client, account, path, name="again"), 429)
    assert f"free at least {size} bytes" in str(problem["detail"])


def test_concurrent_uploads_of_one_user_cannot_pass_the_storage_quota_together(
    settings: Settings, account: Account, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path
) -> None:
    """Five uploads at once with room for one: one is kept, on SQLite as on PostgreSQL, and the refused ones leave
    no file. Each waits a moment between its check and its insert, so without the two serialised all would pass."""
    x, y = digits_arrays()
    data = write_image_zip(tmp_path / "digits.zip", x[:100], y[:100], root="digits").read_bytes()
    _override(factory, account, storage_bytes=len(data))
    checked = store.quotas.check_storage

    def check_then_wait(*args: Any, **kwargs: Any) -> None:
        checked(*args, **kwargs)
        time.sleep(0.3)

    monkeypatch.setattr("api.routes.datasets.check_storage", check_then_wait)
    statuses = at_once(settings, account, 5, "/api/v1/datasets", files=lambda i: {"file": (f"d{i}.zip", data)})
    assert statuses == [201, 429, 429, 429, 429]
    assert dataset_rows(factory) == 1 and len(files_left(settings)) == 1


def test_the_openapi_document_lists_the_429s(app: FastAPI) -> None:
    paths = app.openapi()["paths"]
    for path, method in (("/api/v1/jobs", "post"), ("/api/v1/datasets", "post")):
        assert "quota" in paths[path][method]["responses"]["429"]["description"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            statuses = operation["responses"]
            assert ("429" in statuses) == ("401" in statuses), (method, path)  # every key's rate is limited
    assert "429" not in paths["/api/v1/health"]["get"]["responses"]
