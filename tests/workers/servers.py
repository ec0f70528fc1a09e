"""Private Redis and PostgreSQL servers on free loopback ports, which a fault test may stop and start again without
disturbing the machine's own servers (which other tests use at the same time)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.workers.service import free_port, wait_for


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl), or None when they are not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def private_postgres_skip_reason() -> str | None:
    """Why a private PostgreSQL cannot be started here, or None when it can."""
    if postgres_bin() is None:
        return "PostgreSQL's server programs (initdb, pg_ctl) are not installed"
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return "a private PostgreSQL runs as the postgres user, which needs root and runuser"
    return None


class RedisServer:
    """`redis-server` on a free port, keeping nothing on disk."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        """Start the server and wait until it answers."""
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._answers, 20, "the private Redis")
        return self

    def _answers(self) -> bool:
        return subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                              check=False).stdout.strip() == b"PONG"

    def stop(self) -> None:
        """Stop the server (what it held is gone: it keeps nothing on disk)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


class PostgresServer:
    """A PostgreSQL cluster of its own in a temporary folder, on a free port, run as the postgres user."""

    def __init__(self) -> None:
        binaries = postgres_bin()
        assert binaries is not None
        self.bin, self.port = binaries, free_port()
        self.root = Path(tempfile.mkdtemp(prefix="netsynth-pg-"))  # not under pytest's root-only tmp folders
        self.data = self.root / "data"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        os.chmod(self.root, 0o755)
        shutil.chown(self.root, "postgres", "postgres")
        self._as_postgres("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def _as_postgres(self, program: str, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(self.bin / program), *args], check=True,
                       capture_output=True, cwd=self.root)

    def _ctl(self, *args: str) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.root / "server.log"),
                          "-o", f"-p {self.port} -h 127.0.0.1 -k {self.root}", *args)

    def start(self) -> PostgresServer:
        """Start the cluster and wait until it accepts connections."""
        self._ctl("start")
        return self

    def restart(self) -> None:
        """Restart the cluster at once (fast shutdown: every connection is cut)."""
        self._ctl("-m", "fast", "restart")

    def close(self) -> None:
        """Stop the cluster and delete its folder."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._ctl("-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
