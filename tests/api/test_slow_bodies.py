"""Slow request bodies, over raw sockets to uvicorn: a body is received before its request takes a database
connection or a place among the requests at work (`api.bodies`), so clients that send their headers and part of a
body and then stall keep nothing from other users, and each is answered 408 once nothing has come for
NETSYNTH_BODY_TIMEOUT_S."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from typing import cast

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from infra.settings import Settings
from tests.api.conftest import Account, make_account
from tests.nets import Net, insert_model
from tests.store.factories import ready_dataset
from tests.workers.service import ApiServer, wait_for

BOUNDARY = "slowboundary"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"
PART = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.png\"\r\n"
        "Content-Type: image/png\r\n\r\n").encode() + b"\x89PNG\r\n"
"""The first bytes of a multipart predict body: the stalled clients send these and then nothing more."""
LENGTH = 100_000
"""The Content-Length the stalled clients declare (they send far less)."""


@contextlib.contextmanager
def serving(settings: Settings) -> Iterator[tuple[ApiServer, QueuePool]]:
    """uvicorn serving the app of `settings` on a free port, and its engine's pool."""
    with ApiServer(settings) as running:
        engine: Engine = cast(FastAPI, running.server.config.app).state.engine
        assert isinstance(engine.pool, QueuePool)
        yield running, engine.pool
    engine.dispose()


def stall(port: int, path: str, key: str, content_type: str = MULTIPART, first: bytes = PART) -> socket.socket:
    """A connection that sent a POST's headers (declaring LENGTH bytes) and `first`, and then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = (f"POST {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {LENGTH}\r\n\r\n")
    sock.sendall(head.encode() + first)
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of what the server sent until it closed the connection."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    head, _, rest = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, rest[: int(headers["content-length"])]


@pytest.fixture
def stalling(factory: sessionmaker[Session]) -> Account:
    """The user whose clients stall (another than `account`, who wants answers meanwhile)."""
    return make_account(factory, "slow@example.org")


def _targets(factory: sessionmaker[Session], who: Account, net: Net) -> dict[str, tuple[str, str, bytes]]:
    """Each kind of route with a body: its path, the Content-Type and the first bytes a stalled client sends."""
    model = insert_model(factory, who.user, net)
    dataset = ready_dataset(factory, who.user)
    return {
        "predict": (f"/api/v1/models/{model.id}/predict", MULTIPART, PART),
        "explain": (f"/api/v1/models/{model.id}/explain", "application/json", b'{"method": "occlusion", "te'),
        "upload": ("/api/v1/datasets", MULTIPART, PART.replace(b'name="files"', b'name="file"')),
        "job": ("/api/v1/jobs", "application/json", f'{{"dataset_id": "{dataset}", "bud'.encode()),
    }


@pytest.mark.parametrize("route", ["predict", "explain", "upload", "job"])
def test_a_stalled_body_is_answered_408(route: str, settings: Settings, factory: sessionmaker[Session],
                                        stalling: Account, image_net: Net) -> None:
    path, content_type, first = _targets(factory, stalling, image_net)[route]
    with serving(settings.model_copy(update={"body_timeout_s": 0.5})) as (server, _engine), \
            stall(server.port, path, stalling.key, content_type, first) as sock:
        status, headers, body = answer(sock)  # the server closes the connection after its answer
    assert (status, headers["content-type"]) == (408, "application/problem+json"), body
    problem = json.loads(body)
    assert (problem["status"], problem["type"]) == (408, "urn:netsynth:problem:request-timeout")
    assert "NETSYNTH_BODY_TIMEOUT_S" in problem["detail"] and problem["instance"] == path


def test_a_trickling_body_is_answered_408_once_it_comes_slower_than_the_minimum_rate(
        settings: Settings, factory: sessionmaker[Session], stalling: Account, image_net: Net) -> None:
    """A byte every 0.1 s never leaves the server waiting a whole timeout for the next one; past the first timeout
    it comes far slower than `api.bodies.MIN_BYTES_PER_S`, so it is answered 408 all the same (without the rate it
    would hold the connection for as long as its 100,000 bytes take)."""
    path, content_type, first = _targets(factory, stalling, image_net)["predict"]
    with serving(settings.model_copy(update={"body_timeout_s": 0.5})) as (server, _engine), \
            stall(server.port, path, stalling.key, content_type, first) as sock:
        sock.settimeout(0.1)
        reply, sent = b"", 0
        while not reply and sent < 200:  # 20 s of trickle at most
            try:
                reply = sock.recv(65536)
            except TimeoutError:
                sock.sendall(b"x")
                sent += 1
        sock.settimeout(10)
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 408 "), (sent, reply[:200])
    assert b"came too slowly" in reply and sent < 100


def test_stalled_bodies_keep_no_connection_and_no_place_from_other_users(
        settings: Settings, factory: sessionmaker[Session], account: Account, stalling: Account, image_net: Net,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """More stalled predict and explain requests than there are places among the requests at work (their keys'
    use due to be recorded: on SQLite, a write), and meanwhile another user's requests are answered, and no pooled
    connection is taken."""
    limit = 2
    monkeypatch.setattr("api.app.admission_limit", lambda _engine: limit)
    targets = _targets(factory, stalling, image_net)
    with serving(settings.model_copy(update={"body_timeout_s": 600})) as (server, pool), \
            contextlib.ExitStack() as stack:
        for i in range(2 * limit + 2):
            path, content_type, first = targets["predict" if i % 2 else "explain"]
            stack.enter_context(stall(server.port, path, stalling.key, content_type, first))
        state = server.server.server_state
        wait_for(lambda: len(state.tasks) >= 2 * limit + 2, 30, "the stalled requests to reach the app", 0.02)
        assert pool.checkedout() == 0
        with httpx.Client(base_url=server.url, headers=account.auth, timeout=60) as client:
            for _ in range(3):
                me = client.get("/api/v1/me")
                assert me.status_code == 200, me.text
                assert client.patch("/api/v1/me", json={"display_name": "Ada"}).status_code == 200
                assert pool.checkedout() == 0  # the stalled requests hold none
    assert me.json()["email"] == account.user.email
