"""Fixtures of the client's tests: the real service (PostgreSQL, Redis, a Celery worker, the app over HTTP), as the
worker tests run it; a proxy that can cut a connection."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.workers.conftest import Keys, digits, pg_db, pg_redis_settings, pg_skip_reason, redis_url, worker_factory

__all__ = ["digits", "pg_db", "pg_redis_settings", "pg_skip_reason", "redis_url", "worker_factory"]


def key_of(headers: dict[str, str]) -> str:
    """The API key of an Authorization header."""
    return headers["Authorization"].removeprefix("Bearer ")


def keys_of(keys: Keys) -> tuple[str, str]:
    """Alice's and Bob's API keys."""
    return key_of(keys.alice), key_of(keys.bob)


@dataclass
class CuttingProxy:
    """A TCP proxy to `port` that cuts its first connection once the server has sent `marker`: what came before
    it and the marker itself reach the client, then both sockets close. Later connections pass untouched."""

    port: int
    marker: bytes
    connections: int = 0
    cut: bool = False
    listener: socket.socket = field(default_factory=socket.socket)

    def __post_init__(self) -> None:
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            server = socket.create_connection(("127.0.0.1", self.port))
            first = self.connections == 1
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, first), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, cutting: bool) -> None:
        seen = b""
        try:
            while data := source.recv(65536):
                if cutting and not self.cut:
                    seen += data
                    if (at := seen.find(self.marker)) >= 0:
                        target.sendall(data[: len(data) - (len(seen) - at - len(self.marker))])
                        self.cut = True
                        break
                target.sendall(data)
        except OSError:
            pass
        for s in (source, target):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        """Stop accepting connections."""
        self.listener.close()


@pytest.fixture
def cutting_proxy() -> Iterator[list[CuttingProxy]]:
    """Proxies a test starts (append to the list); closed at the end."""
    proxies: list[CuttingProxy] = []
    yield proxies
    for proxy in proxies:
        proxy.close()
