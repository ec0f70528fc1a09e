"""API CPU of one job status poll: `GET /jobs/{id}` with an API key, against `netsynth serve` in a process of its own.

A fresh database (a SQLite file, or with `--db postgresql` a new PostgreSQL database at `NETSYNTH_TEST_PG` as for
the tests) holds one user, one key and a running job with an event. The server runs as `netsynth serve` runs it (its
access lines go to a file); one client polls the job `--polls` times over a kept-alive connection, `--gap` seconds
apart (as real pollers are: spaced requests are what wakes a rate limiter's housekeeping), with the rate limit
raised past what it sends. Measured: the server process's CPU time (user + system, /proc) over the polls, less what
it spends idle over as long, per poll; `--broker redis://...` keeps the rate limits in Redis as a deployment does.
Prints one JSON line per `--rounds` round, then their minimum and median (other processes on the machine only ever
add to a round's figure: the minimum is the steadiest). `--asgi` calls the app in this process instead, without
HTTP server or client, back to back (its CPU time per poll, minimum of the rounds).

Usage: ``python bench/poll_cpu.py [--db sqlite|postgresql] [--polls 500] [--gap 0.02] [--rounds 3] [--broker URL]
[--asgi]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from infra.settings import Settings  # noqa: E402
from store.db import make_engine, make_session_factory, session_scope  # noqa: E402
from store.jobs import append_event, transition  # noqa: E402
from store.migrate import upgrade  # noqa: E402
from store.models import JobState  # noqa: E402
from tests.api.conftest import make_account  # noqa: E402
from tests.store.conftest import _fresh_pg_database, _pg_reason  # noqa: E402
from tests.store.factories import make_job  # noqa: E402
from tests.workers.service import free_port, settings_env, wait_for  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process `pid` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def database(kind: str, folder: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{folder / 'poll.db'}"
    else:
        yield from _fresh_pg_database(_pg_reason())


def arrange(url: str) -> tuple[str, str]:
    """A user's key and a running job of theirs with one event, in the migrated database `url`."""
    upgrade(url)
    engine = make_engine(url)
    factory = make_session_factory(engine)
    account = make_account(factory, "poller@example.org")
    with session_scope(factory) as s:
        job = make_job(s, account.user)
        transition(job, JobState.RUNNING)
        append_event(s, job, "attempt", {"n": 0})
        job_id = str(job.id)
    engine.dispose()
    return account.key, job_id


@contextlib.contextmanager
def server(settings: Settings, folder: Path) -> Iterator[tuple[str, int]]:
    """`netsynth serve` on a free port: its URL and process id."""
    port = free_port()
    env = {**settings_env(settings), "NETSYNTH_RATE_LIMIT_PER_MINUTE": str(10**9),
           "NETSYNTH_RATE_LIMIT_BURST": str(10**6)}
    with (folder / "serve.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-c", "from api.cli import main; main()", "serve", "--port",
                                 str(port)], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{url}/api/v1/health", timeout=5).status_code == 200
        return False

    try:
        wait_for(up, 60, "the server")
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def measure(url: str, pid: int, key: str, job_id: str, polls: int, gap: float) -> dict[str, float]:
    """Server CPU ms per poll (idle CPU over the same wall time subtracted)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        for _ in range(50):  # warm: connections, caches, prepared statements
            assert client.get(f"/api/v1/jobs/{job_id}").status_code == 200
        idle_start, wall_start = cpu_seconds(pid), time.monotonic()
        time.sleep(polls * gap)
        idle = cpu_seconds(pid) - idle_start
        idle_wall = time.monotonic() - wall_start
        start, wall_start = cpu_seconds(pid), time.monotonic()
        for _ in range(polls):
            answer = client.get(f"/api/v1/jobs/{job_id}")
            assert answer.status_code == 200, answer.text
            if gap:
                time.sleep(gap)
        used, wall = cpu_seconds(pid) - start, time.monotonic() - wall_start
    idle_share = idle * wall / idle_wall if idle_wall else 0.0
    return {"api_cpu_ms_per_poll": round((used - idle_share) * 1000 / polls, 3),
            "idle_cpu_ms_per_s": round(idle * 1000 / idle_wall, 3), "wall_s": round(wall, 1)}


def measure_asgi(settings: Settings, key: str, job_id: str, polls: int, rounds: int) -> list[float]:
    """CPU ms per poll (this process's, min of `rounds`) through the ASGI app alone: no HTTP server or client."""
    import asyncio
    import logging

    from starlette.types import Message

    from api.app import create_app

    app = create_app(settings.model_copy(update={"rate_limit_per_minute": 10**9, "rate_limit_burst": 10**6}))
    logging.disable(logging.INFO)  # the access line goes nowhere here, as in the harness it stands for
    path = f"/api/v1/jobs/{job_id}"
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "server": ("test", 80),
             "client": ("127.0.0.1", 1), "headers": [(b"host", b"test"), (b"authorization", f"Bearer {key}".encode())]}

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        assert message["type"] != "http.response.start" or message["status"] == 200, message

    async def run() -> list[float]:
        for _ in range(50):
            await app(dict(scope), receive, send)
        figures = []
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(polls):
                await app(dict(scope), receive, send)
            figures.append(round((time.process_time() - start) * 1000 / polls, 3))
        return figures

    try:
        return asyncio.run(run())
    finally:
        app.state.engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--polls", type=int, default=500)
    p.add_argument("--gap", type=float, default=0.02, help="seconds between polls")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--broker", default="", help="a redis:// URL: rate limits in Redis (default: in memory)")
    p.add_argument("--asgi", action="store_true", help="call the ASGI app in this process instead (no HTTP)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, database(args.db, Path(tmp)) as url:
        folder = Path(tmp)
        key, job_id = arrange(url)
        settings = Settings(database_url=url, blob_dir=folder / "blobs",
                            broker_url=args.broker or f"filesystem://{folder}/broker")
        if args.asgi:
            figures = measure_asgi(settings, key, job_id, args.polls, args.rounds)
            print(json.dumps({"db": args.db, "asgi": True, "polls": args.polls, "rounds": figures,
                              "min_cpu_ms_per_poll": min(figures)}))
            return
        rounds = []
        with server(settings, folder) as (base, pid):
            for _ in range(args.rounds):
                rounds.append(measure(base, pid, key, job_id, args.polls, args.gap))
                print(json.dumps(rounds[-1]), flush=True)
    figures = [r["api_cpu_ms_per_poll"] for r in rounds]
    print(json.dumps({"db": args.db, "broker": "redis" if args.broker else "memory", "polls": args.polls,
                      "gap_s": args.gap, "rounds": args.rounds, "min_api_cpu_ms_per_poll": min(figures),
                      "median_api_cpu_ms_per_poll": statistics.median(figures)}))


if __name__ == "__main__":
    main()
