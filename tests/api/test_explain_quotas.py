"""An explain request costs its owner like a job: a place among their active explanations (apart from their jobs),
device-seconds, and the bytes of its input and answer. Over a quota it is a 429 problem saying which and what would
free it, and nothing is stored or sent; deleting an answered request frees its bytes, not its time."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from infra.broker import EXPLAIN_HARD_SECONDS, filesystem_dir
from infra.settings import Settings
from store.db import session_scope
from store.explain_runs import charge
from store.explanations import answer_bytes, fail_explanation, finish_explanation
from store.models import ExplanationRequest, TrainedModel, User
from store.quotas import set_quota
from tests.api.conftest import Account, assert_problem
from tests.datasets import png_bytes
from tests.store.factories import make_model

pytestmark = pytest.mark.anyio

PNG = png_bytes(np.arange(64, dtype=np.uint8).reshape(8, 8, 1))
IMAGE = {"kind": "image", "shape": [8, 8, 1], "resize": "centre-crop"}
TEXT = {"json": {"text": "a good film", "method": "occlusion"}}
DATASET_BYTES = 1234  # each model's job's dataset (tests.store.factories)


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    """The API's settings, with room for two active explanations."""
    return Settings(database_url=db_url, blob_dir=tmp_path / "blobs", broker_url=f"filesystem://{tmp_path}/broker",
                    max_active_explanations_per_user=2)


def _model(factory: sessionmaker[Session], account: Account, kind: str = "text") -> TrainedModel:
    with session_scope(factory) as s:  # its job stays queued: one of the user's active jobs
        return make_model(s, s.get_one(User, account.user.id), classes=["a", "b"],
                          preprocessing=IMAGE if kind == "image" else {"kind": "text"})


def _ask(client: httpx.AsyncClient, account: Account, model: TrainedModel, **request: Any) -> Any:
    return client.post(f"/api/v1/models/{model.id}/explain", headers=account.auth, **(request or TEXT))


def _image(account: Account, client: httpx.AsyncClient, model: TrainedModel) -> Any:
    return _ask(client, account, model, files={"file": ("cat.png", PNG, "image/png")}, data={"method": "gradcam"})


def _stored(factory: sessionmaker[Session]) -> int:
    with factory() as s:
        return int(s.scalar(select(func.count()).select_from(ExplanationRequest)) or 0)


def _sent(settings: Settings) -> int:
    folder = filesystem_dir(settings.broker_url)
    assert folder is not None
    return len(list(folder.resolve().glob("*.msg")))


def _override(factory: sessionmaker[Session], account: Account, **limits: int) -> None:
    with session_scope(factory) as s:
        set_quota(s.get_one(User, account.user.id), limits)


async def _quotas(client: httpx.AsyncClient, account: Account) -> dict[str, Any]:
    r = await client.get("/api/v1/me", headers=account.auth)
    assert r.status_code == 200, r.text
    quotas: dict[str, Any] = r.json()["quotas"]
    return quotas


async def test_explanations_past_the_active_limit_are_429_apart_from_the_jobs(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], settings: Settings,
) -> None:
    model, other = _model(factory, account), _model(factory, account)  # two queued jobs: the active-jobs limit
    first = await _ask(client, account, model)
    assert first.status_code == 202, first.text  # the active jobs do not count against explanations
    assert (await _ask(client, account, other)).status_code == 202
    problem = assert_problem(await _ask(client, account, model), 429)
    assert problem["type"] == "urn:netsynth:problem:quota-exceeded"
    assert problem["reason"] == "quota-active-explanations"
    assert "2 queued or running explanation(s), your limit is 2" in str(problem["detail"])
    assert (_stored(factory), _sent(settings)) == (2, 2)  # nothing stored, nothing sent
    with session_scope(factory) as s:  # a worker answers one: its place is free again
        assert fail_explanation(s, uuid.UUID(first.json()["id"]), "invalid-input", "no")
    assert (await _ask(client, account, model)).status_code == 202


async def test_an_input_past_the_storage_left_is_429_and_the_stored_bytes_count(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], settings: Settings,
) -> None:
    model = _model(factory, account, "image")
    _override(factory, account, storage_bytes=DATASET_BYTES + len(PNG) - 1)
    problem = assert_problem(await _image(account, client, model), 429)
    assert problem["reason"] == "quota-storage" and f"input of {len(PNG)} bytes does not fit" in str(problem["detail"])
    assert "DELETE /models/{model_id}/explanations/{explanation_id}" in str(problem["detail"])
    assert (_stored(factory), _sent(settings)) == (0, 0)

    _override(factory, account, storage_bytes=100_000)
    asked = await _image(account, client, model)
    assert asked.status_code == 202, asked.text
    assert (await _quotas(client, account))["storage_bytes"]["used"] == DATASET_BYTES + len(PNG)
    attribution, overlay = {"input": "cat.png", "map": [[0.25] * 8] * 8}, b"\x89PNG" + bytes(500)
    with session_scope(factory) as s:
        assert finish_explanation(s, uuid.UUID(asked.json()["id"]), attribution, overlay)
    stored = DATASET_BYTES + len(PNG) + answer_bytes(attribution, overlay)
    assert answer_bytes(attribution, overlay) > len(overlay)
    assert (await _quotas(client, account))["storage_bytes"]["used"] == stored  # the answer counts too

    _override(factory, account, storage_bytes=stored + len(PNG) - 1)  # a second copy no longer fits
    assert assert_problem(await _image(account, client, model), 429)["reason"] == "quota-storage"
    assert _stored(factory) == 1


async def test_an_explanation_holds_its_time_limit_of_device_seconds_then_counts_what_it_spent(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], settings: Settings,
) -> None:
    model = _model(factory, account)
    held_by_job = 600  # the model's job holds its budget while it stays queued
    _override(factory, account, device_seconds=held_by_job + EXPLAIN_HARD_SECONDS - 1)
    problem = assert_problem(await _ask(client, account, model), 429)
    assert problem["reason"] == "quota-device-seconds"
    assert f"up to {EXPLAIN_HARD_SECONDS} device-seconds" in str(problem["detail"])
    assert (_stored(factory), _sent(settings)) == (0, 0)

    _override(factory, account, device_seconds=10_000)
    asked = await _ask(client, account, model)
    assert asked.status_code == 202, asked.text
    assert (await _quotas(client, account))["device_seconds"]["used"] == held_by_job + EXPLAIN_HARD_SECONDS
    with session_scope(factory) as s:  # as the worker's heartbeat and answer charge what it spent
        charge(s, uuid.UUID(asked.json()["id"]), 2.6)
        assert finish_explanation(s, uuid.UUID(asked.json()["id"]), {"input": "0", "scores": [0.5]})
    assert (await _quotas(client, account))["device_seconds"]["used"] == held_by_job + 3


async def test_deleting_an_answered_explanation_frees_its_bytes_and_keeps_its_seconds(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session],
) -> None:
    model = _model(factory, account, "image")
    asked = (await _image(account, client, model)).json()
    url = asked["url"]
    assert assert_problem(await client.delete(url, headers=account.auth), 409)["type"] == \
        "urn:netsynth:problem:conflict"  # still queued: it holds its place until answered
    with session_scope(factory) as s:
        charge(s, uuid.UUID(asked["id"]), 4.0)
        assert finish_explanation(s, uuid.UUID(asked["id"]), {"input": "cat.png", "map": [[1.0]]}, b"overlay")
    before = await _quotas(client, account)
    assert before["storage_bytes"]["used"] > DATASET_BYTES

    assert (await client.delete(url, headers=account.auth)).status_code == 204
    after = await _quotas(client, account)
    assert after["storage_bytes"]["used"] == DATASET_BYTES  # its input and answer are gone
    assert after["device_seconds"]["used"] == before["device_seconds"]["used"]  # what it spent still counts
    for gone in (client.get(url, headers=account.auth), client.get(f"{url}/overlay.png", headers=account.auth),
                 client.delete(url, headers=account.auth)):
        assert assert_problem(await gone, 404)["reason"] == "explanation-absent"
    with factory() as s:
        row = s.get_one(ExplanationRequest, uuid.UUID(asked["id"]))
        assert (row.image, row.overlay, row.attribution, row.size_bytes) == (None, None, None, 0)
        assert json.dumps(row.device_seconds) == "4.0"
