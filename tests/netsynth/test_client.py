"""The client's errors, retries and isolation, against the real app (no worker needed)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import httpx
import pytest

from infra.settings import Settings
from netsynth import ApiError, AsyncClient, Client, ConnectionFailed
from netsynth._protocol import Call, Reply, SseParser, Upload, delay_after_reply, multipart, retry_after
from tests.netsynth.conftest import keys_of
from tests.workers.conftest import Digits, make_keys
from tests.workers.service import ROOT, ApiServer, free_port


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    code = ("import sys, netsynth, netsynth.cli; "
            "print(sorted(m for m in ('api', 'store', 'core', 'synthesis', 'workers', 'jax', 'fastapi', 'sqlalchemy', "
            "'celery') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_problems_raise_api_error(pg_redis_settings: Settings, tmp_path: Path) -> None:
    alice, _ = keys_of(make_keys(pg_redis_settings.database_url))
    one_class = tmp_path / "one.zip"
    with zipfile.ZipFile(one_class, "w") as archive:
        archive.writestr("a/1.png", b"not even an image")
    with ApiServer(pg_redis_settings) as api, Client(api.url + "/api/v1/", alice, progress=False) as client:
        missing = str(uuid.uuid4())
        with pytest.raises(ApiError) as caught:
            client.job(missing)
        error = caught.value
        assert error.status == 404 and error.title == "Not Found" and error.body["status"] == 404
        assert error.type.startswith("urn:netsynth:problem:") and error.detail and missing in error.body["instance"]
        with pytest.raises(ApiError) as caught:
            client.upload_dataset(one_class)
        assert caught.value.status == 422 and caught.value.reason is not None, caught.value.body
        assert client.datasets() == []  # the refused upload left nothing behind
        with pytest.raises(ApiError) as caught:
            list(client.watch(missing))
        assert caught.value.status == 404
        with Client(api.url, "not-a-key", progress=False) as stranger, pytest.raises(ApiError) as caught:
            stranger.jobs()
        assert caught.value.status == 401 and str(caught.value).startswith("401 Unauthorized")

        async def run() -> None:
            async with AsyncClient(api.url, alice, progress=False) as aclient:
                with pytest.raises(ApiError) as caught:
                    await aclient.model(missing)
                assert caught.value.status == 404

        asyncio.run(run())


def test_rate_limited_calls_are_retried_after_retry_after(pg_redis_settings: Settings) -> None:
    settings = pg_redis_settings.model_copy(update={"rate_limit_per_minute": 60, "rate_limit_burst": 2})
    alice, bob = keys_of(make_keys(settings.database_url))
    statuses: list[int] = []
    with ApiServer(settings) as api, Client(api.url, alice, progress=False) as client:
        client._http.event_hooks["response"].append(lambda r: statuses.append(r.status_code))
        started = time.monotonic()
        for _ in range(4):
            assert client.jobs() == []
        assert 429 in statuses and statuses.count(200) == 4, statuses
        assert time.monotonic() - started >= 1.0
        with Client(api.url, bob, progress=False, retries=1) as impatient, pytest.raises(ApiError) as caught:
            for _ in range(4):
                impatient.datasets()
        assert caught.value.status == 429 and caught.value.retry_after is not None and caught.value.retry_after >= 1


def test_an_unreachable_service_is_one_connection_error() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", "k", progress=False) as client, \
            pytest.raises(ConnectionFailed, match="GET /api/v1/jobs"):
        client.jobs()


def test_retry_after_and_event_stream_parsing() -> None:
    assert retry_after(httpx.Headers({"Retry-After": "3"})) == 3
    assert retry_after(httpx.Headers({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0
    assert retry_after(httpx.Headers({})) is None
    assert delay_after_reply(Reply(503, httpx.Headers({"Retry-After": "999"}), b""), 0) == 60
    assert delay_after_reply(Reply(503, httpx.Headers({}), b""), 4) is None
    assert delay_after_reply(Reply(500, httpx.Headers({}), b""), 0) is None
    parser = SseParser()
    lines = [": ping", "id: 3", "event: stage", "data: {\"a\":", "data: 1}", ""]
    assert [parser.feed(line) for line in lines][-1] == {"id": "3", "event": "stage", "data": "{\"a\":\n1}"}


def test_progress_bars_on_a_terminal(pg_redis_settings: Settings, digits: Digits, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """With stderr a terminal, an upload and a watch draw their bars there and return what they would without."""
    monkeypatch.setattr("netsynth.client.shown", lambda progress: progress)
    alice, _ = keys_of(make_keys(pg_redis_settings.database_url))
    with ApiServer(pg_redis_settings) as api, Client(api.url, alice) as client:
        dataset = client.upload_dataset(digits.zip_path)
        job = client.create_job(dataset["id"], budget=10)
        client.cancel(job["id"])  # no worker: cancelled while queued
        events = list(client.watch(job["id"]))
    assert [e["kind"] for e in events] == ["queued", "cancelled", "end"]
    assert events[-1]["payload"] == {"state": "cancelled"}
    drawn = capsys.readouterr().err
    assert "uploading digits.zip" in drawn and "cancelled" in drawn


def test_an_upload_is_read_from_disk_as_it_is_sent(tmp_path: Path) -> None:
    """The multipart body knows its length without reading the file, then reads it in chunks, counted for the bar."""
    path = tmp_path / "big.bin"
    path.write_bytes(b"x" * 3_000_000)
    reads: list[int] = []

    class Counter:
        def advance(self, count: int) -> None:
            reads.append(count)

        def restart(self) -> None:
            reads.clear()

    call = Call("POST", "/api/v1/datasets", upload=Upload("file", path, path.name))
    with multipart(call, Counter()) as parts, httpx.Client() as http:
        request = http.build_request("POST", "http://netsynth.invalid/api/v1/datasets", **parts)
        assert int(request.headers["content-length"]) > 3_000_000 and reads == []
        sent = len(request.read())
    assert sent == int(request.headers["content-length"]) and sum(reads) == 3_000_000 and max(reads) <= 65536
