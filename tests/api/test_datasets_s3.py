"""Datasets on the S3 blob store (a real SeaweedFS on loopback): an upload becomes one object, samples are read from
it, deleting the dataset deletes the object; a store that does not answer is a 503 problem, not a traceback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from api.app import create_app
from infra.settings import Settings
from tests.api.conftest import Account, assert_problem, make_account
from tests.api.test_datasets import upload
from tests.datasets import digits_arrays, write_image_zip
from tests.store.s3server import S3Server
from tests.workers.service import free_port

URL = "/api/v1/datasets"


@pytest.fixture
def aws_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


async def _client(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield app, client
    app.state.engine.dispose()


@pytest.fixture
def digits_zip(tmp_path: Path) -> Path:
    x, y = digits_arrays()
    return write_image_zip(tmp_path / "digits.zip", x[:300], y[:300])


@pytest.mark.anyio
async def test_upload_samples_and_delete_through_the_bucket(db_url: str, tmp_path: Path, s3_server: S3Server,
                                                             aws_env: None, digits_zip: Path) -> None:
    bucket = s3_server.bucket()
    settings = Settings(database_url=db_url, blob_dir=tmp_path / "scratch", blob_url=f"s3://{bucket}/netsynth",
                        s3_endpoint_url=s3_server.endpoint, broker_url=f"filesystem://{tmp_path}/broker")
    listing = s3_server.client()

    def objects() -> list[str]:
        return [o["Key"] for o in listing.list_objects_v2(Bucket=bucket).get("Contents", [])]

    async for app, client in _client(settings):
        account: Account = make_account(app.state.session_factory)
        r = await upload(client, account, digits_zip, name="digits")
        assert r.status_code == 201, r.text
        dataset = r.json()
        (key,) = objects()
        assert key.startswith(f"netsynth/datasets/{account.user.id.hex}/")
        assert listing.head_object(Bucket=bucket, Key=key)["ContentLength"] == digits_zip.stat().st_size
        assert not [p for p in (tmp_path / "scratch" / ".staging").iterdir()]  # the received file was consumed
        samples = await client.get(f"{URL}/{dataset['id']}/samples", headers=account.auth, params={"limit": 4})
        assert samples.status_code == 200, samples.text
        image = await client.get(samples.json()["samples"][0]["image_url"], headers=account.auth)
        assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
        gone = await client.delete(f"{URL}/{dataset['id']}", headers=account.auth)
        assert gone.status_code == 204
        assert objects() == []
        assert not [p for p in (tmp_path / "scratch" / ".cache").iterdir()]  # nor its local copy


@pytest.mark.anyio
async def test_a_store_that_does_not_answer_is_a_503(db_url: str, tmp_path: Path, aws_env: None,
                                                     digits_zip: Path) -> None:
    settings = Settings(database_url=db_url, blob_dir=tmp_path / "scratch", blob_url="s3://netsynth/x",
                        s3_endpoint_url=f"http://127.0.0.1:{free_port()}", broker_url=f"filesystem://{tmp_path}/b")
    async for app, client in _client(settings):
        account = make_account(app.state.session_factory)
        body = assert_problem(await upload(client, account, digits_zip), 503)
        assert "blob store does not answer" in str(body["detail"]) and "Traceback" not in str(body)
        assert (await client.get(URL, headers=account.auth)).json() == []  # no dataset row either
