"""Scaling, measured: one digits search on 1 and on 2 worker processes (one core each), then 2 jobs on 2 workers.

Each phase gets a fresh PostgreSQL database (`NETSYNTH_TEST_PG`, as for the tests), a private `redis-server` on a
free port (so `INFO commandstats` counts this phase's broker traffic alone, not other people's tests on the shared
Redis), a blob folder, and `--workers` Celery worker processes (`tests.workers.service.WorkerProcess`, one pool
process each), every thread of each pinned to one core of its own (`os.sched_setaffinity`, threads started later
inherit it). A real API server (in this process) takes the digits upload and the jobs (`--budget` seconds,
`--seed`). Measured per phase: candidates trained per hour of search, the coordinator's overhead per candidate
(Redis commands and messages sent, PostgreSQL transactions of the database — `pg_stat_database.xact_commit` less
this script's own queries — and the `job_events` / `candidates` / `trial_tasks` rows, bytes of trial weights
stored in the blob store), each worker's CPU, and the time from submission to the final model. Then the
coordinator's CPU per remote trial is timed in this process on the same database and Redis (`CeleryExecutor`'s
submit and poll, and decoding a stored trial checkpoint). The load average before and after goes into the
results (the machine is shared). Prints a table; writes `bench/results/scale.json`, which
`bench/simulate_scale.py` reads.

Usage: ``python bench/scale.py [--budget 120] [--seed 0] [--quick] [--out FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import protocol  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402
from load import cpu_seconds  # noqa: E402

from infra.settings import Settings  # noqa: E402
from store.migrate import upgrade  # noqa: E402
from tests.datasets import digits_arrays, write_image_zip  # noqa: E402
from tests.store.conftest import _fresh_pg_database, _pg_reason  # noqa: E402
from tests.workers.conftest import make_keys  # noqa: E402
from tests.workers.service import ApiServer, WorkerProcess, free_port, wait_for  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "scale.json"
V1 = "/api/v1"
SENDS = ("lpush", "rpush", "publish")  # Redis commands that carry a Celery message (tasks, control, replies)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=int, default=120, help="each job's time budget in seconds")
    p.add_argument("--seed", type=int, default=0, help="each job's seed (split and search)")
    p.add_argument("--quick", action="store_true", help="30 s budgets (a smoke run; its figures mean little)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    protocol.add_busy(p)
    args = p.parse_args(argv)
    if args.quick:
        args.budget = 30
    return args


def threads(pid: int) -> list[int]:
    """Every thread of `pid` and of its descendants."""
    tids: list[int] = []
    with contextlib.suppress(FileNotFoundError):
        tids += [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        for tid in list(tids):
            with contextlib.suppress(FileNotFoundError):
                for child in Path(f"/proc/{pid}/task/{tid}/children").read_text().split():
                    tids += threads(int(child))
    return tids


def processes(pid: int) -> list[int]:
    """`pid` and its descendants."""
    found = [pid]
    with contextlib.suppress(FileNotFoundError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            for child in Path(f"/proc/{pid}/task/{tid}/children").read_text().split():
                found += processes(int(child))
    return found


def pin(pid: int, cpu: int) -> None:
    """Run every thread of `pid` and its descendants on core `cpu` only (threads and processes started later by
    them inherit it)."""
    for tid in threads(pid):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(tid, {cpu})


@contextlib.contextmanager
def private_redis(folder: Path) -> Iterator[str]:
    """A `redis-server` of this phase's own on a free port (no persistence); its URL."""
    port = free_port()
    with (folder / "redis.log").open("ab") as log:
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no"], stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_for(lambda: _pings(url), 30, "redis-server")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _pings(url: str) -> bool:
    with contextlib.suppress(redis.RedisError):
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    return False


def commandstats(url: str) -> dict[str, int]:
    """Calls per Redis command since the server started."""
    info = cast(dict[str, dict[str, Any]], redis.Redis.from_url(url).info("commandstats"))
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in info.items()}


class Pg:
    """One autocommit connection to the phase's database, counting its own transactions."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
        self.queries = 0

    def all(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        self.queries += 1
        return self.conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def commits(self) -> int:
        self.all("SELECT pg_stat_force_next_flush()")
        return int(self.all("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")[0][0])


def weights_seen(blob_dir: Path, sizes: dict[str, int]) -> None:
    """Record the size of every trial weights file under the blob store now (they are deleted after the search)."""
    for path in (blob_dir / "trials").rglob("*") if (blob_dir / "trials").exists() else []:
        with contextlib.suppress(FileNotFoundError):
            if path.is_file():
                sizes[str(path)] = max(sizes.get(str(path), 0), path.stat().st_size)


def phase(name: str, workers: int, jobs: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Run `jobs` jobs at once on `workers` pinned worker processes; what it cost and what it trained."""
    print(f"phase {name}: {workers} worker(s), {jobs} job(s), budget {args.budget} s", flush=True)
    folder.mkdir()
    load_before = os.getloadavg()
    database = cast(Generator[str, None, None], _fresh_pg_database(None))
    with private_redis(folder) as broker:
        db_url = next(database)
        try:
            upgrade(db_url)
            settings = Settings(database_url=db_url, broker_url=broker, blob_dir=folder / "blobs",
                                default_queue=f"scale-{uuid.uuid4().hex[:6]}", lease_seconds=30)
            procs = [WorkerProcess(settings, folder / f"worker{i}.log") for i in range(workers)]
            try:
                for i, w in enumerate(procs):
                    w.wait_ready(180)
                    pin(w.proc.pid, i % (os.cpu_count() or 1))
                result = run_jobs(settings, procs, jobs, args, folder)
                result["coordinator_cpu"] = coordinator_cpu(settings, folder)
            finally:
                for w in procs:
                    w.stop()
        finally:
            database.close()  # drops the database
    result.update({"name": name, "workers": workers, "jobs_at_once": jobs,
                   "loadavg_before": [round(v, 2) for v in load_before],
                   "loadavg_after": [round(v, 2) for v in os.getloadavg()]})
    return result


def run_jobs(settings: Settings, procs: list[WorkerProcess], jobs: int, args: argparse.Namespace,
             folder: Path) -> dict[str, Any]:
    keys = make_keys(settings.database_url)
    x, y = digits_arrays()
    zip_path = write_image_zip(folder / "digits.zip", x, y, root="digits")
    pg = Pg(settings.database_url)
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, headers=keys.alice, timeout=120) as client:
        with zip_path.open("rb") as f:
            r = client.post(f"{V1}/datasets", files={"file": ("digits.zip", f)}, data={"name": "digits"})
        r.raise_for_status()
        dataset = r.json()["id"]
        redis0, commits0 = commandstats(settings.broker_url), pg.commits()
        queries0 = pg.queries
        pids = {w.proc.pid: processes(w.proc.pid) for w in procs}
        cpu0 = {p: sum(cpu_seconds(c) for c in kids) for p, kids in pids.items()}
        started = time.monotonic()
        ids = []
        for _ in range(jobs):
            r = client.post(f"{V1}/jobs", json={"dataset_id": dataset, "budget": args.budget, "seed": args.seed})
            r.raise_for_status()
            ids.append(r.json()["id"])
        sizes: dict[str, int] = {}
        sample = folder / "sample.ckpt"

        def ended() -> bool:
            weights_seen(settings.blob_dir, sizes)
            if sizes and not sample.exists():
                with contextlib.suppress(OSError):
                    shutil.copy(max(sizes, key=sizes.__getitem__), sample)
            rows = pg.all("SELECT count(*) FROM jobs WHERE state NOT IN ('succeeded', 'failed', 'cancelled')")
            return int(rows[0][0]) == 0

        wait_for(ended, args.budget * 4 + 300, "the jobs to end", interval=0.5)
        wall = time.monotonic() - started
        own = pg.queries - queries0 + 2  # this script's polls, and the two of `commits` below
        commits = pg.commits() - commits0 - own
        redis1 = commandstats(settings.broker_url)
        cpu = {p: round(sum(cpu_seconds(c) for c in processes(p)) - cpu0[p], 1) for p in pids}
    per_job = [job_figures(pg, uuid.UUID(i)) for i in ids]
    pg.conn.close()
    calls = {k: v - redis0.get(k, 0) for k, v in redis1.items() if v - redis0.get(k, 0) > 0}
    calls.pop("info", None)
    trained = sum(j["trained"] for j in per_job)
    remote = sum(j["remote_trials"] for j in per_job)
    total = sum(calls.values())
    sent = sum(calls.get(c, 0) for c in SENDS)
    weights = sum(sizes.values())
    search_s = max(j["search_s"] or 0.0 for j in per_job)
    events = sum(j["events"] for j in per_job)
    return {
        "jobs": per_job, "wall_s": round(wall, 1),
        "candidates_trained": trained, "remote_trials": remote,
        "candidates_per_hour": round(3600 * trained / search_s, 1) if search_s else None,
        "train_s_per_candidate": round(sum(j["train_s"] for j in per_job) / trained, 2) if trained else None,
        "time_to_final_s": [j["final_s"] for j in per_job],
        "redis": {"commands": total, "messages_sent": sent,
                  "commands_per_candidate": round(total / trained, 1) if trained else None,
                  "messages_per_candidate": round(sent / trained, 2) if trained else None,
                  "commands_per_s": round(total / wall, 1), "by_command": dict(sorted(calls.items()))},
        "postgres": {"transactions": commits, "bench_queries_subtracted": own,
                     "transactions_per_candidate": round(commits / trained, 1) if trained else None,
                     "transactions_per_s": round(commits / wall, 1),
                     "job_events": events,
                     "candidates_rows": sum(j["candidate_rows"] for j in per_job),
                     "trial_tasks_rows": remote,
                     "events_per_candidate": round(events / trained, 2) if trained else None},
        "blobs": {"trial_weight_files": len(sizes), "trial_weight_bytes": weights,
                  "bytes_per_candidate": round(weights / trained) if trained else None,
                  "bytes_per_remote_trial": round(weights / len(sizes)) if sizes else None},
        "worker_cpu_s": list(cpu.values()),
        "worker_busy": [round(c / wall, 2) for c in cpu.values()],
    }


def job_figures(pg: Pg, job_id: uuid.UUID) -> dict[str, Any]:
    """What one job trained, where, and when its stages ended (seconds after it was submitted)."""
    (state, created), = pg.all("SELECT state, created_at FROM jobs WHERE id = %s", job_id)
    events = pg.all("SELECT kind, at FROM job_events WHERE job_id = %s ORDER BY seq", job_id)
    candidates = pg.all("SELECT metrics, cost FROM candidates WHERE job_id = %s", job_id)
    remote = int(pg.all("SELECT count(*) FROM trial_tasks WHERE job_id = %s", job_id)[0][0])

    def at(kind: str, last: bool = False) -> float | None:
        times = [a for k, a in events if k == kind]
        return round((times[-1 if last else 0] - created).total_seconds(), 1) if times else None

    trained = [(m, c) for m, c in candidates if m.get("curve")]
    workers: dict[str, int] = {}
    for _m, c in trained:
        workers[str(c.get("worker"))] = workers.get(str(c.get("worker")), 0) + 1
    attempt, done = at("attempt", last=True), at("search_done")
    train_s = sum(float(c.get("seconds") or c.get("train_s") or 0.0) for _m, c in trained)
    return {"id": str(job_id), "state": str(state), "events": len(events), "candidate_rows": len(candidates),
            "trained": len(trained), "remote_trials": remote, "by_worker": workers,
            "search_s": round(done - attempt, 1) if done is not None and attempt is not None else None,
            "train_s": round(train_s, 1), "final_s": at("final"), "ended_s": at(str(state).lower(), last=True)}


def coordinator_cpu(settings: Settings, folder: Path, n: int = 40) -> dict[str, Any]:
    """CPU of this process for the coordinator's share of a remote trial: `CeleryExecutor.submit` (a row and a
    message), one `poll` with one trial outstanding, and decoding a stored trial checkpoint."""
    from core import checkpoint
    from store.blobs import FileBlobStore
    from store.db import make_engine, make_session_factory, session_scope
    from store.models import BudgetTier, Dataset, Job, JobState, User
    from synthesis.executor import TrialRequest
    from workers.app import make_app
    from workers.context import Context
    from workers.executor import CeleryExecutor

    engine = make_engine(settings.database_url)
    ctx = Context(settings, make_session_factory(engine), FileBlobStore(settings.blob_dir), "coordinator")
    with session_scope(ctx.factory) as s:
        dataset = s.query(Dataset).first()
        assert dataset is not None
        job = Job(owner_id=s.query(User).first().id, dataset_id=dataset.id,  # type: ignore[union-attr]
                  budget_tier=BudgetTier.CUSTOM, budget_seconds=60, state=JobState.SUCCEEDED)
        s.add(job)
        s.flush()
        job_id = job.id
    executor = CeleryExecutor(ctx, make_app(settings), job_id, 1, f"nobody-{uuid.uuid4().hex[:6]}", "coord",
                              start_timeout_s=3600, count=lambda _ours: n)
    request = {"candidate": {}, "spec": {}, "config": {"time_limit_s": 5.0}, "rung_scores": {1: [0.5] * 20},
               "horizon": 27, "eta": 3, "not_after": time.time() + 3600, "train_rows": 1000}
    submits, polls = [], []
    for i in range(n):
        t = time.process_time()
        executor.submit(TrialRequest(index=i, **request))  # type: ignore[arg-type]
        submits.append(time.process_time() - t)
        executor._sent = {k: v for k, v in executor._sent.items() if v.index == i}  # one outstanding
        t = time.process_time()
        executor.poll()
        polls.append(time.process_time() - t)
    executor.cancel()
    sample = folder / "sample.ckpt"
    decode = None
    if sample.exists():
        data = sample.read_bytes()
        checkpoint.from_bytes(data)  # the first decode pays for imports
        t = time.process_time()
        for _ in range(5):
            checkpoint.from_bytes(data)
        decode = (time.process_time() - t) / 5
    engine.dispose()
    redis.Redis.from_url(settings.broker_url).delete(executor.queue)
    submits.sort()
    polls.sort()
    return {"submit_ms": round(1000 * submits[n // 2], 2), "poll_ms": round(1000 * polls[n // 2], 2),
            "decode_ms": round(1000 * decode, 2) if decode is not None else None,
            "checkpoint_bytes": sample.stat().st_size if sample.exists() else None,
            "note": "medians of this process's CPU time over n calls; a poll runs every 0.25 s while trials are out"}


def report(result: dict[str, Any]) -> str:
    """The table printed at the end."""
    phases = result["phases"]
    rows: list[tuple[str, ...]] = [("figure", *(p["name"] for p in phases))]

    def row(label: str, f: Any) -> None:
        rows.append((label, *(str(f(p)) for p in phases)))

    row("candidates trained (remote)", lambda p: f"{p['candidates_trained']} ({p['remote_trials']})")
    row("candidates / hour of search", lambda p: p["candidates_per_hour"])
    row("train s / candidate", lambda p: p["train_s_per_candidate"])
    row("time to final model s", lambda p: " / ".join(map(str, p["time_to_final_s"])))
    row("wall s (all jobs ended)", lambda p: p["wall_s"])
    row("Redis commands / candidate", lambda p: p["redis"]["commands_per_candidate"])
    row("Redis messages sent / cand.", lambda p: p["redis"]["messages_per_candidate"])
    row("PG transactions / candidate", lambda p: p["postgres"]["transactions_per_candidate"])
    row("job_events / candidate", lambda p: p["postgres"]["events_per_candidate"])
    row("PG transactions / s", lambda p: p["postgres"]["transactions_per_s"])
    row("weight bytes / candidate", lambda p: p["blobs"]["bytes_per_candidate"])
    row("worker CPU busy", lambda p: p["worker_busy"])
    row("coord. CPU submit/poll/decode ms",
        lambda p: f"{p['coordinator_cpu']['submit_ms']} / {p['coordinator_cpu']['poll_ms']} / "
                  f"{p['coordinator_cpu']['decode_ms']}")
    row("load average before", lambda p: p["loadavg_before"])
    row("load average after", lambda p: p["loadavg_after"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if (reason := _pg_reason()) is not None:
        raise SystemExit(f"bench/scale.py needs PostgreSQL: {reason}")
    if shutil.which("redis-server") is None:
        raise SystemExit("bench/scale.py needs redis-server on the PATH (it starts a private one per phase)")
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    folder = Path(tempfile.mkdtemp(prefix="netsynth-scale-"))
    started, load_before = time.monotonic(), os.getloadavg()
    try:
        phases = [phase("1 worker, 1 job", 1, 1, args, folder / "a"),
                  phase("2 workers, 1 job", 2, 1, args, folder / "b"),
                  phase("2 workers, 2 jobs", 2, 2, args, folder / "c")]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    one, two = phases[0]["candidates_per_hour"], phases[1]["candidates_per_hour"]
    result = {"settings": {"budget_s": args.budget, "seed": args.seed, "quick": args.quick, "dataset": "digits",
                           "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
              "loadavg_before": [round(v, 2) for v in load_before],
              "loadavg_after": [round(v, 2) for v in os.getloadavg()],
              "wall_s": round(time.monotonic() - started, 1),
              "speedup_2_workers": round(two / one, 2) if one and two else None,
              "phases": phases}
    print(report(result))
    print(f"speed-up of candidates per hour, 2 workers against 1: {result['speedup_2_workers']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    protocol.write(args.out, result, run_record)


if __name__ == "__main__":
    main()
