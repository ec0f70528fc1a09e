"""Datasets on the S3 blob store (a real SeaweedFS on loopback): an upload becomes one object, samples are read from
it, deleting the dataset deletes the object; a store that does not answer is a 503 problem, not a traceback."""

from __future__ import annotations

import io
import zipfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from api.app import create_app
from api.routes.datasets import get_blobs
from infra.settings import Settings
from store.s3blobs import S3BlobStore, s3_client
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


def _bucket(s3_server: S3Server, db_url: str, tmp_path: Path) -> tuple[str, Settings, Callable[[], list[str]]]:
    """A fresh bucket, the API's settings that keep blobs in it, and a listing of the objects it holds."""
    bucket = s3_server.bucket()
    settings = Settings(database_url=db_url, blob_dir=tmp_path / "scratch", blob_url=f"s3://{bucket}/netsynth",
                        s3_endpoint_url=s3_server.endpoint, broker_url=f"filesystem://{tmp_path}/broker")
    listing = s3_server.client()

    def objects() -> list[str]:
        return [o["Key"] for o in listing.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return bucket, settings, objects


@pytest.fixture
def digits_zip(tmp_path: Path) -> Path:
    x, y = digits_arrays()
    return write_image_zip(tmp_path / "digits.zip", x[:300], y[:300])


@pytest.mark.anyio
async def test_upload_samples_and_delete_through_the_bucket(db_url: str, tmp_path: Path, s3_server: S3Server,
                                                             aws_env: None, digits_zip: Path) -> None:
    bucket, settings, objects = _bucket(s3_server, db_url, tmp_path)

    async for app, client in _client(settings):
        account: Account = make_account(app.state.session_factory)
        r = await upload(client, account, digits_zip, name="digits")
        assert r.status_code == 201, r.text
        dataset = r.json()
        (key,) = objects()
        assert key.startswith(f"netsynth/datasets/{account.user.id.hex}/")
        assert s3_server.client().head_object(Bucket=bucket, Key=key)["ContentLength"] == digits_zip.stat().st_size
        assert not [p for p in (tmp_path / "scratch" / ".staging").iterdir()]  # the received file was consumed
        samples = await client.get(f"{URL}/{dataset['id']}/samples", headers=account.auth, params={"limit": 4})
        assert samples.status_code == 200, samples.text
        image = await client.get(samples.json()["samples"][0]["image_url"], headers=account.auth)
        assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
        gone = await client.delete(f"{URL}/{dataset['id']}", headers=account.auth)
        assert gone.status_code == 204
        assert objects() == []
        cache = tmp_path / "scratch" / ".cache"
        assert not cache.exists() or not list(cache.iterdir())  # nor a local copy (samples read ranges, not one)


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


class _Fetched:
    """Counts what an S3 client's GETs ask for (the bytes each answer says it carries) and whether a whole object
    was downloaded (download_fileobj, as a local copy is fetched)."""

    def __init__(self, client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes, self.gets, self.downloads = 0, 0, 0
        get_object, download = client.get_object, client.download_fileobj

        def counted_get(**kwargs: Any) -> Any:
            answer = get_object(**kwargs)
            self.bytes += int(answer["ContentLength"])
            self.gets += 1
            return answer

        def counted_download(*args: Any, **kwargs: Any) -> Any:
            self.downloads += 1
            return download(*args, **kwargs)

        monkeypatch.setattr(client, "get_object", counted_get)
        monkeypatch.setattr(client, "download_fileobj", counted_download)


@pytest.mark.anyio
@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
async def test_a_thumbnail_reads_ranges_not_the_dataset(db_url: str, tmp_path: Path, s3_server: S3Server,
                                                        aws_env: None, monkeypatch: pytest.MonkeyPatch,
                                                        compression: int) -> None:
    """An npz of 12 noise images of 768x768x3 (21 MB): a thumbnail GET fetches the archive's directory, the arrays'
    headers and the one row (the rows before it too when they are compressed, streamed, never held), in bounded
    ranged GETs, and no local copy; before, each GET downloaded the whole object into the cache."""
    x = np.random.default_rng(0).integers(0, 256, (12, 768, 768, 3), dtype=np.uint8)
    path = tmp_path / "noise.npz"
    with zipfile.ZipFile(path, "w", compression) as archive:
        for key, array in (("x", x), ("y", np.arange(12) % 2)):
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array)
    size = path.stat().st_size
    settings = Settings(database_url=db_url, blob_dir=tmp_path / "scratch", blob_url=f"s3://{s3_server.bucket()}/n",
                        s3_endpoint_url=s3_server.endpoint, broker_url=f"filesystem://{tmp_path}/broker")
    async for app, client in _client(settings):
        account = make_account(app.state.session_factory)
        r = await upload(client, account, path)
        assert r.status_code == 201, r.text
        fetched = _Fetched(s3_client(s3_server.endpoint), monkeypatch)
        first = await client.get(f"{URL}/{r.json()['id']}/samples/1.png", headers=account.auth)
        assert first.status_code == 200 and first.content.startswith(b"\x89PNG")
        assert fetched.downloads == 0 and fetched.bytes < 8 * 2**20, (fetched.bytes, size)
        last = await client.get(f"{URL}/{r.json()['id']}/samples/11.png", headers=account.auth)
        assert last.status_code == 200 and fetched.downloads == 0
        if compression == zipfile.ZIP_STORED:  # the last row alone, not the ten before it
            assert fetched.bytes < 16 * 2**20, (fetched.bytes, size)
        listed = await client.get(f"{URL}/{r.json()['id']}/samples", headers=account.auth)
        assert listed.status_code == 200 and len(listed.json()["samples"]) == 12
    assert not (tmp_path / "scratch" / ".cache").exists()


def test_the_local_copies_stay_under_the_cap_however_recently_used(s3_server: S3Server, tmp_path: Path) -> None:
    """A copy used a moment ago is evicted like any other once the cap is reached, least recently used first;
    before, a copy used in the last minute was never evicted, so a tenant fetching a few datasets in turn kept
    the cache over its cap."""
    store = S3BlobStore(s3_server.bucket(), scratch=tmp_path, cache_bytes=2500, client=s3_server.client())
    keys = [store.put(io.BytesIO(bytes([i]) * 1000), f"c{i}") for i in range(4)]
    copies = [store.local_path(key) for key in keys]
    cached = sorted(path.name for path in (tmp_path / ".cache").iterdir())
    assert cached == sorted(path.name for path in copies[2:])  # 4000 bytes over 2500: the first two went
    assert copies[3].read_bytes() == b"\3" * 1000
    store.local_path(keys[2])  # used again: now the most recent
    store.local_path(keys[0])
    assert sorted(path.name for path in (tmp_path / ".cache").iterdir()) == sorted([copies[2].name, copies[0].name])


@pytest.mark.anyio
async def test_a_failed_blob_delete_keeps_the_dataset_whole(db_url: str, tmp_path: Path, s3_server: S3Server,
                                                            aws_env: None, digits_zip: Path) -> None:
    """The blob store failing to delete (here: pointed at a bucket that does not exist) answers 503 and leaves the
    dataset listed with its object; sent again once the store answers, the delete removes both. Before, the row
    was committed away first: a 503 for a dataset that was gone, and its object left behind for good."""
    _, settings, objects = _bucket(s3_server, db_url, tmp_path)

    async for app, client in _client(settings):
        account = make_account(app.state.session_factory)
        r = await upload(client, account, digits_zip, name="digits")
        assert r.status_code == 201, r.text
        url = f"{URL}/{r.json()['id']}"
        assert len(objects()) == 1
        app.dependency_overrides[get_blobs] = lambda: S3BlobStore(
            "no-such-bucket", "netsynth", scratch=tmp_path / "scratch", client=s3_client(s3_server.endpoint))
        assert_problem(await client.delete(url, headers=account.auth), 503)
        assert (await client.get(url, headers=account.auth)).status_code == 200
        assert len(objects()) == 1
        app.dependency_overrides.clear()
        assert (await client.get(f"{url}/samples/0.png", headers=account.auth)).status_code == 200  # still whole
        assert (await client.delete(url, headers=account.auth)).status_code == 204
        assert (await client.get(url, headers=account.auth)).status_code == 404
        assert objects() == []
