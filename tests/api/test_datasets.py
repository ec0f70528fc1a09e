"""`/datasets`: uploads are validated and profiled before acceptance; a refused one leaves no row and no file
(every kind of hostile upload is in tests/api/test_hostile_uploads.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from infra.settings import Settings
from store.apikeys import create_api_key
from store.db import session_scope
from store.models import Dataset, Job, JobState
from tests.api.conftest import Account, assert_problem
from tests.datasets import digits_arrays, png_bytes, write_image_zip, write_text_csv, write_zip
from tests.store.factories import make_user

pytestmark = pytest.mark.anyio
URL = "/api/v1/datasets"


def files_left(settings: Settings) -> list[Path]:
    """Every file under the blob store's folder."""
    return sorted(p for p in Path(settings.blob_dir).rglob("*") if p.is_file())


def dataset_rows(factory: sessionmaker[Session]) -> int:
    """How many dataset rows the database holds."""
    with factory() as s:
        return int(s.scalar(select(func.count()).select_from(Dataset)) or 0)


async def upload(client: httpx.AsyncClient, account: Account, path: Path, **fields: str) -> httpx.Response:
    """POST the file to /datasets as the account, with the given form fields."""
    with path.open("rb") as f:
        return await client.post(URL, headers=account.auth, files={"file": (path.name, f)}, data=fields)


@pytest.fixture
def digits_zip(tmp_path: Path) -> Path:
    x, y = digits_arrays()
    return write_image_zip(tmp_path / "digits.zip", x[:300], y[:300], root="digits")


async def test_digits_zip_is_accepted_with_its_profile(client: httpx.AsyncClient, account: Account,
                                                        digits_zip: Path, settings: Settings) -> None:
    r = await upload(client, account, digits_zip)
    assert r.status_code == 201, r.text
    body = r.json()
    assert r.headers["location"] == f"{URL}/{body['id']}"
    assert body["name"] == "digits" and body["modality"] == "image" and body["format"] == "image_zip"
    assert body["status"] == "ready" and body["sample_count"] == 300
    assert body["classes"] == [str(i) for i in range(10)]
    assert sum(body["class_counts"].values()) == 300
    assert body["profile"]["image"]["height"] == 8 and body["profile"]["image"]["channels"] == 1
    assert body["size_bytes"] == digits_zip.stat().st_size
    assert len(files_left(settings)) == 1  # the accepted file, and nothing left in staging
    got = await client.get(f"{URL}/{body['id']}", headers=account.auth)
    assert got.json() == body
    listed = await client.get(URL, headers=account.auth)
    assert [d["id"] for d in listed.json()] == [body["id"]]


async def test_text_csv_profile(client: httpx.AsyncClient, account: Account, tmp_path: Path) -> None:
    texts = [f"message number {i} {'win cash now' if i % 2 else 'see you at lunch'}" for i in range(40)]
    labels = ["spam" if i % 2 else "ham" for i in range(40)]
    r = await upload(client, account, write_text_csv(tmp_path / "sms.csv", texts + texts[:3], labels + labels[:3]),
                     name="sms")
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["modality"] == "text" and body["class_counts"] == {"ham": 22, "spam": 21}
    assert body["profile"]["duplicates"]["count"] == 3
    assert body["profile"]["text"]["words"]["max"] >= 6


async def test_too_large_upload_is_refused_while_streaming(db_url: str, tmp_path: Path, account: Account,
                                                           digits_zip: Path) -> None:
    from api.app import create_app

    settings = Settings(database_url=db_url, blob_dir=tmp_path / "blobs", max_upload_bytes=10_000,
                        broker_url=f"filesystem://{tmp_path}/broker")
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await upload(client, account, digits_zip)
        assert_problem(r, 413)
    assert dataset_rows(app.state.session_factory) == 0
    assert files_left(settings) == []
    app.state.engine.dispose()


async def test_form_errors(client: httpx.AsyncClient, account: Account, digits_zip: Path, settings: Settings) -> None:
    assert_problem(await client.post(URL, headers=account.auth, json={"file": "x"}), 422)
    r = await client.post(URL, headers=account.auth, files={"other": ("a.zip", b"PK")})
    assert "no file part" in str(assert_problem(r, 422)["detail"])
    assert_problem(await upload(client, account, digits_zip, resize="big"), 422)
    assert files_left(settings) == []


async def test_mixed_sizes_are_accepted_at_the_median_size(client: httpx.AsyncClient, account: Account,
                                                          tmp_path: Path) -> None:
    x, _ = digits_arrays()
    members = [(f"{c}/{i}.png", png_bytes(x[i])) for c in ("a", "b") for i in range(6)]  # 12 of 8x8
    members += [("a/big.png", png_bytes(np.zeros((9, 9), np.uint8))), ("b/wide.png", png_bytes(np.zeros((8, 30, 3),
                                                                                                 np.uint8)))]
    r = await upload(client, account, write_zip(tmp_path / "mixed.zip", members))
    assert r.status_code == 201, r.text
    image = r.json()["profile"]["image"]
    assert (image["height"], image["width"], image["channels"], image["resized"]) == (8, 8, 3, True)
    assert image["resize"]["policy"] == "centre-crop" and image["resize"]["reason"] == "mixed-sizes"
    assert (image["resize"]["native_sizes"], image["resize"]["largest"]) == (3, [8, 30])


async def test_declared_resize(client: httpx.AsyncClient, account: Account, tmp_path: Path) -> None:
    x, _ = digits_arrays()
    members = [(f"{c}/{i}.png", png_bytes(x[i] if i % 2 else np.zeros((12, 10, 1), np.uint8)))
               for c in ("a", "b") for i in range(6)]
    r = await upload(client, account, write_zip(tmp_path / "m.zip", members), resize="16x16")
    assert r.status_code == 201, r.text
    image = r.json()["profile"]["image"]
    assert (image["height"], image["width"]) == (16, 16)
    assert image["resize"]["reason"] == "declared"


async def test_name_conflict_and_owner_scoping(client: httpx.AsyncClient, account: Account, digits_zip: Path,
                                               factory: sessionmaker[Session], settings: Settings) -> None:
    first = (await upload(client, account, digits_zip)).json()
    assert_problem(await upload(client, account, digits_zip), 409)
    assert len(files_left(settings)) == 1
    with session_scope(factory) as s:
        other = create_api_key(s, make_user(s)).plaintext
    auth = {"Authorization": f"Bearer {other}"}
    assert (await client.get(URL, headers=auth)).json() == []
    assert_problem(await client.get(f"{URL}/{first['id']}", headers=auth), 404)
    assert_problem(await client.delete(f"{URL}/{first['id']}", headers=auth), 404)
    assert (await client.get(f"{URL}/{first['id']}", headers=account.auth)).status_code == 200


async def test_delete_refused_while_a_job_runs_then_allowed(client: httpx.AsyncClient, account: Account,
                                                            digits_zip: Path, factory: sessionmaker[Session],
                                                            settings: Settings) -> None:
    ds = (await upload(client, account, digits_zip)).json()
    with session_scope(factory) as s:
        job = Job(owner_id=account.user.id, dataset_id=uuid.UUID(ds["id"]), budget_tier="custom", budget_seconds=60)
        s.add(job)
        s.flush()
        job_id = job.id
    assert_problem(await client.delete(f"{URL}/{ds['id']}", headers=account.auth), 409)
    with session_scope(factory) as s:
        s.get_one(Job, job_id).state = JobState.CANCELLED
    r = await client.delete(f"{URL}/{ds['id']}", headers=account.auth)
    assert r.status_code == 204
    assert_problem(await client.get(f"{URL}/{ds['id']}", headers=account.auth), 404)
    assert files_left(settings) == []
    with factory() as s:
        assert s.get_one(Job, job_id).dataset_id is None  # the finished job stays


async def test_upload_needs_auth(client: httpx.AsyncClient, digits_zip: Path) -> None:
    assert_problem(await client.post(URL, files={"file": ("d.zip", digits_zip.read_bytes())}), 401)


_ = FastAPI  # the app fixture's type, for readers
