"""Real service parts for end-to-end tests: Celery worker processes, an HTTP server, an SSE reader."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from api.app import create_app
from api.processes import worker_command
from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll `predicate` until it returns something truthy (returned) or `timeout` passes (AssertionError)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that gives a child process `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETSYNTH_")}
    env.update({"NETSYNTH_DATABASE_URL": settings.database_url, "NETSYNTH_BROKER_URL": settings.broker_url,
                "NETSYNTH_BLOB_DIR": str(settings.blob_dir), "NETSYNTH_BLOB_URL": settings.blob_url,
                "NETSYNTH_S3_ENDPOINT_URL": settings.s3_endpoint_url,
                "NETSYNTH_BLOB_CACHE_BYTES": str(settings.blob_cache_bytes),
                "NETSYNTH_DEFAULT_QUEUE": settings.default_queue, "NETSYNTH_EXPLAIN_QUEUE": settings.explain_queue,
                "NETSYNTH_EXPLAIN_MAX_ATTEMPTS": str(settings.explain_max_attempts),
                "NETSYNTH_REPUBLISH_AFTER_S": str(settings.republish_after_s),
                "NETSYNTH_LEASE_SECONDS": str(settings.lease_seconds), "PYTHONUNBUFFERED": "1",
                "JAX_PLATFORMS": "cpu"})
    env.pop("XLA_FLAGS", None)  # the test process's 2-device flag is not the worker's business
    return env


@dataclass
class WorkerProcess:
    """A `netsynth worker` (Celery, prefork, one pool process) in its own process group, logging to a file, serving
    `queues` (by default the settings' job queue; `settings.explain_queue` for explanations)."""

    settings: Settings
    log_path: Path
    queues: str = ""
    proc: subprocess.Popen[bytes] = field(init=False)

    def __post_init__(self) -> None:
        command = worker_command(self.queues or self.settings.default_queue, 1)
        command[command.index("--hostname") + 1] = f"test-{uuid.uuid4().hex[:6]}@%h"
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(command, env=settings_env(self.settings), cwd=ROOT, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        """Everything the worker logged so far."""
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90) -> WorkerProcess:
        """Block until the worker reports ready (AssertionError with its log otherwise)."""
        try:
            wait_for(lambda: " ready." in self.log() or self.proc.poll() is not None, timeout, "the worker")
        except AssertionError:
            raise AssertionError(self.log()) from None
        assert self.proc.poll() is None, self.log()
        return self

    def kill_all(self) -> None:
        """SIGKILL the worker and its pool processes at once, as a crashed machine would."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL whatever is left of the process group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class ApiServer:
    """The real app served by uvicorn on a free port, in a thread of the test process."""

    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ApiServer:
        self.thread.start()
        wait_for(lambda: self.server.started, 30, "uvicorn to start", interval=0.05)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def sse_events(client: httpx.Client, url: str, headers: dict[str, str], timeout: float) -> Iterator[dict[str, Any]]:
    """Read a Server-Sent Events stream, yielding each event as {"id", "event", "data" (parsed JSON)}."""
    event: dict[str, Any] = {}
    with client.stream("GET", url, headers={**headers, "Accept": "text/event-stream"}, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                if "data" in event:
                    yield event
                event = {}
            elif line.startswith(":"):
                continue
            else:
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                event[name] = json.loads(value) if name == "data" else value
