"""API fixtures: the real app on a migrated SQLite file and, when reachable, a migrated PostgreSQL database."""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from infra.settings import Settings
from store.apikeys import create_api_key
from store.db import session_scope
from store.migrate import upgrade
from store.models import User
from tests import nets
from tests.nets import Net
from tests.store.conftest import empty_db_url, pg_skip_reason, s3_server
from tests.workers.service import ApiServer

__all__ = ["empty_db_url", "pg_skip_reason", "s3_server"]  # re-exported: the store's database and S3 fixtures


@dataclass(frozen=True)
class Account:
    """A user created for a test and the plaintext of its API key."""

    user: User
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def db_url(empty_db_url: str) -> str:
    """URL of a database migrated to the latest revision."""
    upgrade(empty_db_url)
    return empty_db_url


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    """Settings on the test database, with the blob store and a filesystem broker under tmp_path."""
    return Settings(database_url=db_url, blob_dir=tmp_path / "blobs", broker_url=f"filesystem://{tmp_path}/broker")


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    return create_app(settings)


@pytest.fixture
def factory(app: FastAPI) -> sessionmaker[Session]:
    """The app's own session factory, for arranging and inspecting rows."""
    result: sessionmaker[Session] = app.state.session_factory
    return result


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c
    app.state.engine.dispose()


def make_account(factory: sessionmaker[Session], email: str = "ada@example.org") -> Account:
    """A new user with one API key."""
    with session_scope(factory) as s:
        user = User(email=email, display_name=email.split("@")[0].title())
        s.add(user)
        s.flush()
        key = create_api_key(s, user).plaintext
    return Account(user=user, key=key)


@pytest.fixture
def account(factory: sessionmaker[Session]) -> Account:
    return make_account(factory)


def at_once(settings: Settings, account: Account, times: int, path: str, body: dict[str, Any] | None = None,
            files: Callable[[int], dict[str, Any]] | None = None) -> list[int]:
    """The statuses, sorted, of `times` POSTs of `body` (or of the form `files` gives the i-th) to `path` sent at once
    (threads that start together) with the account's key to the real app served by uvicorn on `settings`. The key's
    use is recorded first, so that authenticating them writes nothing: what they write is the route's own work."""
    together = threading.Barrier(times)
    with ApiServer(settings) as server, httpx.Client(base_url=server.url, headers=account.auth, timeout=60) as client:
        assert client.get("/api/v1/me").status_code == 200

        def send(i: int) -> int:
            together.wait()
            return (client.post(path, json=body) if files is None else client.post(path, files=files(i))).status_code

        with ThreadPoolExecutor(times) as pool:
            return sorted(pool.map(send, range(times)))


def assert_problem(response: httpx.Response, status: int) -> dict[str, object]:
    """Assert `response` is an RFC 9457 problem with `status`, and return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = response.json()
    assert body["status"] == status
    assert {"type", "title", "status", "detail", "instance"} <= body.keys()
    assert body["instance"] == response.request.url.path
    return body


@pytest.fixture(scope="module", name="image_net")
def image_net_fixture() -> Net:
    """An exported image network (8x8x1, a few classes), built once per test module."""
    return nets.image_net()


@pytest.fixture(scope="module", name="text_net")
def text_net_fixture() -> Net:
    """An exported text network, built once per test module."""
    return nets.text_net()


@contextlib.contextmanager
def round_trips(engine: Engine) -> Iterator[list[str]]:
    """The messages to PostgreSQL, sent on the connections `engine`'s pool hands out within the block, that each wait
    for the server's answer (a simple query, or the Sync that ends an extended query: Parse, Bind, Execute), from a
    libpq trace; filled in when the block ends."""
    trips: list[str] = []
    with tempfile.TemporaryFile("w+") as out:

        def trace(dbapi_connection: Any, *_: Any) -> None:
            dbapi_connection.pgconn.trace(out.fileno())

        def untrace(dbapi_connection: Any, *_: Any) -> None:
            dbapi_connection.pgconn.untrace()

        event.listen(engine, "checkout", trace)
        event.listen(engine, "checkin", untrace)
        try:
            yield trips
        finally:
            event.remove(engine, "checkout", trace)
            event.remove(engine, "checkin", untrace)
        out.seek(0)
        messages = [line.split("\t", 4)[1:] for line in out.read().splitlines()]  # direction, length, type, contents
        trips += [" ".join(m[2:]) for m in messages if m[:1] == ["F"] and m[2:3] in (["Query"], ["Sync"])]
