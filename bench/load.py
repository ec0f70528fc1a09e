"""Load on the PostgreSQL + Redis deployment: job pollers and event streams while a job runs, then a 1 GB upload.

On loopback only, against the PostgreSQL and Redis of this machine (`NETSYNTH_TEST_PG`, `NETSYNTH_TEST_REDIS` as for
the tests; a fresh database, a queue of its own): `uvicorn api.app:create_app --factory --workers 2` (prometheus
multiprocess mode on) and one Celery worker that runs a real job (scikit-learn's digits, a budget that outlasts the
run). Then, for `--seconds`, `--pollers` clients each `GET /jobs/{id}` every `--poll-interval` seconds while
`--streams` clients hold `GET /jobs/{id}/events` open. Measured: request latency (p50 / p99 / max), errors (any
status but 200, any transport error, a stream that closed early), how long after its commit each live event reached
each stream, the API processes' RSS before / at peak / after and CPU time, reads of `job_events` and transactions per
second in PostgreSQL, and the requests `/metrics` counted. Then `--upload-mb` of CSV (distinct texts of about
`--row-bytes`, four labels) is uploaded as a dataset while the API processes' RSS is sampled (and their peak, VmHWM,
reset before), also up to the moment the whole body had been sent (the part before validation). Prints a table;
writes `bench/results/load.json`.

Usage: ``python bench/load.py [--seconds 120] [--pollers 200] [--streams 100] [--upload-mb 1024] [--out FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import protocol  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from infra.settings import Settings  # noqa: E402
from store.migrate import upgrade  # noqa: E402
from tests.datasets import digits_arrays, write_image_zip  # noqa: E402
from tests.store.conftest import _fresh_pg_database, _pg_reason  # noqa: E402
from tests.workers.conftest import REDIS, make_keys  # noqa: E402
from tests.workers.service import WorkerProcess, free_port, settings_env, wait_for  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "load.json"
V1 = "/api/v1"
MB = 1024 * 1024


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0, help="how long the pollers and streams run")
    p.add_argument("--pollers", type=int, default=200)
    p.add_argument("--streams", type=int, default=100)
    p.add_argument("--poll-interval", type=float, default=1.0, help="seconds between one poller's requests")
    p.add_argument("--api-workers", type=int, default=2, help="uvicorn processes")
    p.add_argument("--upload-mb", type=int, default=1024, help="size of the uploaded CSV (0: no upload)")
    p.add_argument("--row-bytes", type=int, default=1000, help="about how long each text of the CSV is")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    protocol.add_busy(p)
    return p.parse_args(argv)


def ms(seconds: list[float], q: float) -> float | None:
    """The q-quantile of `seconds` (nearest rank) in milliseconds, None when empty."""
    ordered = sorted(seconds)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1) if ordered else None


def status(pid: int, field: str) -> float:
    """A /proc/PID/status figure in MiB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process `pid` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The uvicorn worker processes of master `pid` (not multiprocessing's resource tracker)."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()]


class RssSampler:
    """The largest RSS of each of `pids`, sampled every `every` seconds in a thread while it runs."""

    def __init__(self, pids: list[int], every: float = 0.1) -> None:
        self.pids, self.every = pids, every
        self.peak = {pid: status(pid, "VmRSS") for pid in pids}
        self.marked: dict[int, float] = {}  # the peaks when `mark` was called
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def mark(self) -> None:
        """Remember the peaks so far."""
        self.marked = dict(self.peak)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for pid in self.pids:
                self.peak[pid] = max(self.peak[pid], status(pid, "VmRSS"))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def pg_counters(url: str) -> tuple[int, int, float]:
    """Reads of job_events (index + sequential scans), committed transactions of the database, and the time."""
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        scans = conn.execute("SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables "
                             "WHERE relname = 'job_events'").fetchone()
        commits = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                               ).fetchone()
    return int(scans[0] if scans else 0), int(commits[0] if commits else 0), time.monotonic()


METRICS_TOKEN = "load-bench"
"""The token the benchmark's API serves `/metrics` to (NETSYNTH_METRICS_TOKEN)."""


@contextlib.contextmanager
def deployment(settings: Settings, workers: int, folder: Path, limited: bool = False
               ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """uvicorn with `workers` processes (multiprocess metrics in `folder`/prom) and one Celery worker; the rate
    limits raised past what the benchmark sends unless `limited`."""
    (folder / "prom").mkdir()
    env = {**settings_env(settings), "PROMETHEUS_MULTIPROC_DIR": str(folder / "prom"),
           "NETSYNTH_METRICS_TOKEN": METRICS_TOKEN}
    if not limited:
        env.update({"NETSYNTH_RATE_LIMIT_PER_MINUTE": "100000000", "NETSYNTH_RATE_LIMIT_BURST": "100000000"})
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory", "--host", "127.0.0.1",
               "--port", str(port), "--workers", str(workers), "--log-level", "warning", "--no-access-log"]
    with (folder / "api.log").open("ab") as log:
        api = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    worker = WorkerProcess(settings, folder / "worker.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _healthy(url) and len(children(api.pid)) == workers, 120, "the API")
        worker.wait_ready(180)
        yield url, api
    finally:
        api.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            api.wait(timeout=30)
        api.kill()
        worker.stop()


def _healthy(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}{V1}/health", timeout=2).status_code == 200
    return False


def start_job(url: str, auth: dict[str, str], folder: Path, budget: int) -> str:
    """Upload the digits and submit a job of `budget` seconds; return its id once it runs."""
    x, y = digits_arrays()
    path = write_image_zip(folder / "digits.zip", x, y, root="digits")
    with httpx.Client(base_url=url, headers=auth, timeout=120) as client, path.open("rb") as f:
        r = client.post(f"{V1}/datasets", files={"file": ("digits.zip", f)}, data={"name": "digits"})
        r.raise_for_status()
        r = client.post(f"{V1}/jobs", json={"dataset_id": r.json()["id"], "budget": budget})
        r.raise_for_status()
        job_id: str = r.json()["id"]
        wait_for(lambda: client.get(f"{V1}/jobs/{job_id}").json()["state"] == "running", 300, "the job to run")
    return job_id


async def load(url: str, auth: dict[str, str], job_id: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run the pollers and the streams for `args.seconds`; their latencies, counts and errors."""
    polls: list[float] = []
    opens: list[float] = []
    lags: list[float] = []
    errors: Counter[str] = Counter()
    events = 0
    # idle connections are dropped before uvicorn's keep-alive timeout (5 s) could close one as it is reused
    limits = httpx.Limits(max_connections=args.pollers + args.streams + 10, max_keepalive_connections=None,
                          keepalive_expiry=2.0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.seconds

    async def poller(client: httpx.AsyncClient, i: int) -> None:
        await asyncio.sleep(args.poll_interval * i / args.pollers)  # spread the pollers over one interval
        while loop.time() < deadline:
            started = time.perf_counter()
            try:
                r = await client.get(f"{V1}/jobs/{job_id}")
            except httpx.HTTPError as exc:
                errors[f"poll {type(exc).__name__}"] += 1
            else:
                polls.append(time.perf_counter() - started)
                if r.status_code != 200:
                    errors[f"poll {r.status_code}"] += 1
            await asyncio.sleep(max(0.0, args.poll_interval - (time.perf_counter() - started)))

    async def stream(client: httpx.AsyncClient) -> None:
        nonlocal events
        started, opened, ended = time.perf_counter(), datetime.now(UTC), False
        try:
            async with asyncio.timeout_at(deadline), client.stream(
                    "GET", f"{V1}/jobs/{job_id}/events", headers={"Accept": "text/event-stream"}) as r:
                opens.append(time.perf_counter() - started)
                if r.status_code != 200:
                    errors[f"stream {r.status_code}"] += 1
                    return
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        at = json.loads(line[6:]).get("at")
                        events += 1
                        if at and datetime.fromisoformat(at) >= opened:  # a live event, not the backlog
                            lags.append((datetime.now(UTC) - datetime.fromisoformat(at)).total_seconds())
                    ended = ended or line == "event: end"
            if not ended:
                errors["stream closed early"] += 1
        except TimeoutError:
            pass  # held until the end of the run, as meant
        except httpx.HTTPError as exc:
            errors[f"stream {type(exc).__name__}"] += 1

    timeout = httpx.Timeout(30.0, read=None)
    async with httpx.AsyncClient(base_url=url, headers=auth, limits=limits, timeout=timeout) as client:
        await asyncio.gather(*(stream(client) for _ in range(args.streams)),
                             *(poller(client, i) for i in range(args.pollers)))
    return {"poll": {"requests": len(polls), "per_s": round(len(polls) / args.seconds, 1),
                     "p50_ms": ms(polls, 0.5), "p99_ms": ms(polls, 0.99), "max_ms": ms(polls, 1.0)},
            "sse": {"streams": args.streams, "opened": len(opens), "open_p50_ms": ms(opens, 0.5),
                    "open_p99_ms": ms(opens, 0.99), "events_received": events, "live_events": len(lags),
                    "lag_p50_ms": ms(lags, 0.5), "lag_p99_ms": ms(lags, 0.99)},
            "errors": dict(errors)}


def write_csv(path: Path, size: int, row_bytes: int) -> int:
    """A CSV of `size` bytes or a little more (header `text,label`): distinct texts of about `row_bytes`."""
    words = [f"w{i:03d}" for i in range(1000)]
    rows = 0
    with path.open("w", encoding="utf-8") as f:
        f.write("text,label\n")
        while f.tell() < size:
            block = []
            for _ in range(1000):
                start = (rows * 7919) % len(words)
                text = " ".join(words[(start + k * k) % len(words)] for k in range(row_bytes // 5))
                block.append(f"r{rows} {text},{'abcd'[rows % 4]}\n")
                rows += 1
            f.write("".join(block))
    return rows


def upload(url: str, auth: dict[str, str], pids: list[int], folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Upload `args.upload_mb` of CSV as a dataset; the API processes' RSS growth meanwhile."""
    size = args.upload_mb * MB
    if shutil.disk_usage(folder).free < 4 * size:
        return {"skipped": f"less than {4 * size / MB:.0f} MiB free under {folder}"}
    path = folder / "big.csv"
    rows = write_csv(path, size, args.row_bytes)
    written = path.stat().st_size
    for pid in pids:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = {pid: status(pid, "VmRSS") for pid in pids}
    started = time.monotonic()
    with RssSampler(pids) as sampler, httpx.Client(base_url=url, headers=auth, timeout=None) as client, \
            _Sent(path, sampler.mark) as f:
        r = client.post(f"{V1}/datasets", files={"file": ("big.csv", f, "text/csv")}, data={"name": "big"})
        seconds = time.monotonic() - started
        if r.status_code == 201:
            client.delete(f"{V1}/datasets/{r.json()['id']}")
    path.unlink()
    peak = {pid: max(sampler.peak[pid], status(pid, "VmHWM")) for pid in pids}
    sent = sampler.marked or peak
    return {"bytes": written, "rows": rows, "status": r.status_code, "seconds": round(seconds, 1),
            "rss_before_mb": [round(before[p], 1) for p in pids], "rss_peak_mb": [round(peak[p], 1) for p in pids],
            "rss_growth_mb": round(max(peak[p] - before[p] for p in pids), 1),
            "rss_growth_while_sending_mb": round(max(sent[p] - before[p] for p in pids), 1),
            "detail": None if r.status_code == 201 else r.text[:500]}


class _Sent(io.FileIO):
    """A file that calls `at_end()` when it has been read to its end (the whole body has been sent)."""

    def __init__(self, path: Path, at_end: Callable[[], None]) -> None:
        super().__init__(path, "rb")
        self.at_end = at_end

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        if not data:
            self.at_end()
        return data


def counted(url: str) -> float:
    """GET /jobs/{id} requests that `/metrics` counted (all API processes)."""
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30).text
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "netsynth_http_requests_total" and s.labels.get("route") == f"{V1}/jobs/{{job_id}}")


@contextlib.contextmanager
def fresh_service(name: str, workers: int, limited: bool = False
                  ) -> Iterator[tuple[str, subprocess.Popen[bytes], str, Path]]:
    """A fresh PostgreSQL database, a queue and a folder of their own, and the `deployment` on them: (the API's URL,
    its master process, the database URL, the folder); all dropped afterwards."""
    if (reason := _pg_reason()) is not None:
        raise SystemExit(reason)
    redis.Redis.from_url(REDIS, socket_connect_timeout=3).ping()
    folder = Path(tempfile.mkdtemp(prefix=f"netsynth-{name}-"))
    database = cast(Generator[str, None, None], _fresh_pg_database(None))
    queue = f"{name}-{folder.name[-8:]}"
    try:
        db_url = next(database)
        upgrade(db_url)
        settings = Settings(database_url=db_url, broker_url=REDIS, blob_dir=folder / "blobs", default_queue=queue,
                            lease_seconds=30)
        with deployment(settings, workers, folder, limited) as (url, api):
            yield url, api, db_url, folder
    finally:
        database.close()  # drops the database
        redis.Redis.from_url(REDIS).delete(queue)
        shutil.rmtree(folder, ignore_errors=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with fresh_service("load", args.api_workers) as (url, api, db_url, folder):
        return measure(url, make_keys(db_url).alice, api, db_url, folder, args)


def measure(url: str, auth: dict[str, str], api: subprocess.Popen[bytes], db_url: str, folder: Path,
            args: argparse.Namespace) -> dict[str, Any]:
    job_id = start_job(url, auth, folder, int(args.seconds) + 120)
    pids = children(api.pid)
    rss_before = [round(status(p, "VmRSS"), 1) for p in pids]
    load_before = os.getloadavg()
    counted_before = counted(url)
    scans0, commits0, t0 = pg_counters(db_url)
    api_cpu, client_cpu = sum(map(cpu_seconds, pids)), time.process_time()
    with RssSampler(pids, every=0.5) as sampler:
        result = asyncio.run(load(url, auth, job_id, args))
    api_cpu, client_cpu = sum(map(cpu_seconds, pids)) - api_cpu, time.process_time() - client_cpu
    scans1, commits1, t1 = pg_counters(db_url)
    state = httpx.get(f"{url}{V1}/jobs/{job_id}", headers=auth, timeout=30).json()["state"]
    result.update({
        "job": {"id": job_id, "state_after": state},
        "api_rss_mb": {"before": rss_before, "peak": [round(sampler.peak[p], 1) for p in pids],
                       "after": [round(status(p, "VmRSS"), 1) for p in pids]},
        "database": {"job_events_reads_per_s": round((scans1 - scans0) / (t1 - t0), 1),
                     "transactions_per_s": round((commits1 - commits0) / (t1 - t0), 1)},
        "metrics": {"polls_sent": result["poll"]["requests"], "job_requests_counted": counted(url) - counted_before},
        "machine": {"cores": os.cpu_count(), "loadavg_before": [round(v, 2) for v in load_before],
                    "loadavg_after": [round(v, 2) for v in os.getloadavg()],
                    "api_cpu_s": round(api_cpu, 1), "client_cpu_s": round(client_cpu, 1),
                    "api_cpu_ms_per_poll": round(1000 * api_cpu / max(1, result["poll"]["requests"]), 2)},
    })
    if args.upload_mb:
        result["upload"] = upload(url, auth, pids, folder, args)
    errors = [line for line in (folder / "api.log").read_text(errors="replace").splitlines() if "Error" in line]
    result["api_log_errors"] = dict(Counter(line.strip()[:200] for line in errors).most_common(10))
    return result


def report(result: dict[str, Any]) -> str:
    """The table printed at the end."""
    poll, sse, rss, db = result["poll"], result["sse"], result["api_rss_mb"], result["database"]
    up, machine = result.get("upload"), result["machine"]
    rows = [("GET /jobs/{id}: requests (per s)", f"{poll['requests']} ({poll['per_s']})"),
            ("GET /jobs/{id}: p50 / p99 / max", f"{poll['p50_ms']} / {poll['p99_ms']} / {poll['max_ms']} ms"),
            ("SSE: opened, open p50 / p99", f"{sse['opened']}/{sse['streams']}, {sse['open_p50_ms']} / "
                                            f"{sse['open_p99_ms']} ms"),
            ("SSE: live events, lag p50 / p99", f"{sse['live_events']}, {sse['lag_p50_ms']} / {sse['lag_p99_ms']} ms"),
            ("errors", f"{sum(result['errors'].values())} {result['errors'] or ''}"),
            ("API RSS before / peak / after", f"{rss['before']} / {rss['peak']} / {rss['after']} MiB"),
            ("job_events reads / s, commits / s", f"{db['job_events_reads_per_s']}, {db['transactions_per_s']}"),
            ("polls sent / counted by /metrics", f"{result['metrics']['polls_sent']} / "
                                                 f"{result['metrics']['job_requests_counted']:.0f}"),
            ("load average before / after", f"{machine['loadavg_before']} / {machine['loadavg_after']}"),
            ("CPU s: API, this client", f"{machine['api_cpu_s']}, {machine['client_cpu_s']} "
                                        f"({machine['api_cpu_ms_per_poll']} ms of API per poll)")]
    if up and "skipped" in up:
        rows.append(("upload", up["skipped"]))
    elif up:
        rows += [("upload: size, status, seconds", f"{up['bytes'] / MB:.0f} MiB ({up['rows']} rows), {up['status']}, "
                                                   f"{up['seconds']} s"),
                 ("upload: API RSS growth (sending)", f"{up['rss_growth_mb']} ({up['rss_growth_while_sending_mb']}) "
                                                      f"MiB, peak {up['rss_peak_mb']}")]
    return "\n".join(f"{label:<34} {value}" for label, value in [("figure", "value"), *rows])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    settings = {k: (os.path.relpath(v, ROOT) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result = {"settings": settings, **run(args)}
    result["targets"] = {"p99_ms": 50, "errors": 0, "upload_rss_growth_mb": 100}
    print(report(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    protocol.write(args.out, result, run_record)


if __name__ == "__main__":
    main()
