"""Admission: no more requests at work than the database pool has connections for; a started response leaves;
the health probe and the metrics scrape never wait."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from api.admission import UNBOUNDED_POOL_LIMIT, Admission, admission_limit
from api.app import create_app
from api.fanout import READERS
from infra.settings import Settings
from tests.api.conftest import make_account
from tests.datasets import digits_arrays, write_image_zip

pytestmark = pytest.mark.anyio


def _app(limit: int) -> tuple[FastAPI, list[str], anyio.Event, anyio.Event]:
    """An app whose /work handlers wait for `release`, and whose /stream answers at once and streams until then."""
    app = FastAPI()
    inside: list[str] = []
    release, streaming = anyio.Event(), anyio.Event()

    @app.get("/work/{name}")
    async def work(name: str) -> str:
        inside.append(name)
        await release.wait()
        return name

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b"first"
            streaming.set()
            await release.wait()
        return StreamingResponse(body())

    app.add_middleware(Admission, limit=limit)
    return app, inside, release, streaming


async def test_requests_past_the_limit_wait_their_turn() -> None:
    app, inside, release, _ = _app(limit=2)
    results: list[str] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:

        async def get(name: str) -> None:
            results.append((await client.get(f"/work/{name}")).json())

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for name in "abc":
                    tg.start_soon(get, name)
                while len(inside) < 2:
                    await anyio.sleep(0.01)
                for _ in range(20):  # the third stays out while two are at work
                    await anyio.sleep(0.01)
                    assert len(inside) == 2
                release.set()
    assert sorted(inside) == sorted(results) == ["a", "b", "c"]


async def test_a_started_response_frees_its_place() -> None:
    app, inside, release, streaming = _app(limit=1)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.get, "/stream")
                await streaming.wait()  # the stream's response began and it goes on streaming
                tg.start_soon(client.get, "/work/a")
                while inside != ["a"]:  # admitted beside the stream
                    await anyio.sleep(0.01)
                release.set()


def test_the_limit_is_the_pools_connections_less_the_event_readers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"  # engines that never connect
    assert admission_limit(create_engine(url, pool_size=7, max_overflow=4)) == 7 + 4 - READERS
    assert admission_limit(create_engine(url, pool_size=1, max_overflow=0)) == 1
    assert admission_limit(create_engine(url, pool_size=5, max_overflow=-1)) == UNBOUNDED_POOL_LIMIT
    assert admission_limit(create_engine(url, poolclass=NullPool)) == UNBOUNDED_POOL_LIMIT


async def test_health_and_metrics_answer_while_every_place_is_taken(settings: Settings,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("api.app.admission_limit", lambda _engine: 1)
    app = create_app(settings.model_copy(update={"metrics_token": "scraper"}))
    inside: list[str] = []
    release = anyio.Event()

    @app.get("/api/v1/work/{name}")
    async def work(name: str) -> str:
        inside.append(name)
        await release.wait()
        return name

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.get, "/api/v1/work/a")
                while inside != ["a"]:  # the only place is taken
                    await anyio.sleep(0.01)
                tg.start_soon(client.get, "/api/v1/work/b")
                with anyio.fail_after(10):
                    health = await client.get("/api/v1/health")
                    metrics = await client.get("/metrics", headers={"Authorization": "Bearer scraper"})
                assert inside == ["a"]  # b still waits for its turn
                release.set()
    app.state.engine.dispose()
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert metrics.status_code == 200 and "netsynth_jobs" in metrics.text
    assert inside == ["a", "b"]


async def test_an_upload_waiting_for_its_body_holds_no_place_and_no_connection(
        settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With one place, an upload whose body is slow to arrive lets other requests in, and holds no pooled
    connection meanwhile; once its body has come it is accepted (201)."""
    monkeypatch.setattr("api.app.admission_limit", lambda _engine: 1)
    app = create_app(settings)
    account = make_account(app.state.session_factory)
    x, y = digits_arrays()
    data = write_image_zip(tmp_path / "d.zip", x[:200], y[:200]).read_bytes()
    boundary = "netsynthboundary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d.zip\"\r\n"
            f"Content-Type: application/zip\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    more, started = anyio.Event(), anyio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield head + data[:1000]
        started.set()
        await more.wait()
        yield data[1000:] + tail

    transport = httpx.ASGITransport(app=app)
    headers = {**account.auth, "Content-Type": f"multipart/form-data; boundary={boundary}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                answers: list[httpx.Response] = []

                async def upload() -> None:
                    answers.append(await client.post("/api/v1/datasets", content=body(), headers=headers))

                tg.start_soon(upload)
                await started.wait()
                await anyio.sleep(0.2)  # the route is reading the body now
                assert app.state.engine.pool.checkedout() == 0
                with anyio.fail_after(10):
                    listed = await client.get("/api/v1/datasets", headers=account.auth)
                assert listed.status_code == 200 and listed.json() == []
                more.set()
    app.state.engine.dispose()
    assert answers[0].status_code == 201, answers[0].text
