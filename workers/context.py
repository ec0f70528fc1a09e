"""What a worker process hands each job and trial it runs: its settings, database sessions, blob store and lease
identity (one module beneath `workers.runner` and `workers.executor`, which both need it)."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from infra.settings import Settings
from store.blobs import BlobStore

HOST = socket.gethostname()


@dataclass(frozen=True)
class Context:
    """What a job run needs from its worker: settings, database sessions, the blob store, its own identity."""

    settings: Settings
    factory: sessionmaker[Session]
    blobs: BlobStore
    owner: str


def worker_identity() -> str:
    """A lease owner name: host, process id and a random suffix."""
    return f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def holder_dead(owner: str) -> bool:
    """Whether a lease holder on this host is a process that no longer exists (other hosts: unknown, False)."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != HOST or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def worker_name(hostname: str | None) -> str:
    """How the search log names a worker process: its Celery node name (or host) and process id."""
    return f"{hostname or HOST}:{os.getpid()}"
