"""Jobs survive a killed worker, again and again: SIGKILL of the pool process mid-search, `--jobs` jobs in a row.

Against the real PostgreSQL (a fresh database) and Redis of this machine (`NETSYNTH_TEST_PG`, `NETSYNTH_TEST_REDIS`
as for the tests), one Celery worker process: each job (scikit-learn's digits, `--budget` seconds) is submitted
through a real API server; once its search has trained a candidate, the process running it is killed with SIGKILL.
Celery sees the pool process die and requeues the task, a new pool process restarts the job with what is left of
its budget, and the job must end `succeeded` with exactly one model per variant, one `succeeded` event, its
candidates saved once (as many rows as the search log of its last attempt), both attempts' device-seconds within
110 % of the budget, and no file in the blob store but the datasets'. Prints a table; writes
`bench/results/faults.json`.

Usage: ``python bench/faults.py [--jobs 10] [--budget 60] [--out FILE]``
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import protocol  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from infra.settings import Settings  # noqa: E402
from store.models import Candidate, Dataset, JobEvent, SearchResult  # noqa: E402
from tests.datasets import digits_arrays, write_image_zip  # noqa: E402
from tests.store.conftest import _fresh_pg_database, _pg_reason  # noqa: E402
from tests.workers.conftest import REDIS, Digits, Keys, make_keys  # noqa: E402
from tests.workers.jobs import Db, submit  # noqa: E402
from tests.workers.service import WorkerProcess, wait_for  # noqa: E402


def one_job(settings: Settings, digits: Digits, keys: Keys, budget: int, name: str) -> dict[str, Any]:
    """Submit a job, kill its pool process once a candidate has trained, and check how it ended."""
    db = Db(settings.database_url)
    started = time.monotonic()
    job_id = submit(settings, digits, keys, budget, name)
    wait_for(lambda: any(c["curve"] for c in db.events(job_id, "candidate")), 300, "a trained candidate")
    holder = db.job(job_id).lease_owner
    assert holder is not None
    os.kill(int(holder.split(":")[1]), signal.SIGKILL)
    job = wait_for(lambda: db.ended(job_id), 600, "the job to end")
    with db.factory() as s:
        candidates = s.scalar(select(func.count()).select_from(Candidate).where(Candidate.job_id == job_id))
        search = s.scalars(select(SearchResult.summary).where(SearchResult.job_id == job_id)).all()
        events = s.execute(select(JobEvent.at, JobEvent.kind, JobEvent.payload).where(JobEvent.job_id == job_id)
                           .order_by(JobEvent.seq)).all()
    logged = search[0]["trials"] if len(search) == 1 else None
    restart = max(i for i, e in enumerate(events) if e.kind == "attempt")  # the last attempt's timeline
    timeline = [(round((e.at - events[restart].at).total_seconds(), 1),
                 e.payload.get("stage", e.kind) if e.kind == "stage" else e.kind) for e in events[restart:]
                if e.kind in ("attempt", "stage", "search_done", "final", "compressed", "succeeded")]
    row = {"job": str(job_id), "state": job.state.value, "attempts": job.attempts, "models": db.models(job_id),
           "succeeded_events": db.kinds(job_id).count("succeeded"), "candidates": candidates,
           "candidates_logged": logged, "device_seconds": round(job.device_seconds, 1), "budget": budget,
           "wall_s": round(time.monotonic() - started, 1), "error": job.error, "last_attempt": timeline}
    row["ok"] = (row["state"] == "succeeded" and row["models"] in (["dense"], ["compressed", "dense"])
                 and row["succeeded_events"] == 1 and candidates == logged and job.attempts == 2
                 and job.device_seconds <= 1.1 * budget)
    db.engine.dispose()
    return row


def blob_files(settings: Settings) -> list[str]:
    """Every file under the blob store, relative to it."""
    root = Path(settings.blob_dir)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "faults.json")
    protocol.add_busy(parser)
    args = parser.parse_args()
    if (reason := _pg_reason()) is not None:
        sys.exit(f"bench/faults.py needs PostgreSQL: {reason}")
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    with tempfile.TemporaryDirectory(prefix="netsynth-faults-") as tmp:
        x, y = digits_arrays()
        digits = Digits(write_image_zip(Path(tmp) / "digits.zip", x, y, root="digits"), x[:0], y[:0])
        for url in _fresh_pg_database(None):
            from store.migrate import upgrade

            upgrade(url)
            settings = Settings(database_url=url, broker_url=REDIS, blob_dir=Path(tmp) / "blobs",
                                default_queue=f"faults-{os.getpid()}", lease_seconds=3)
            worker = WorkerProcess(settings, Path(tmp) / "worker.log").wait_ready()
            rows: list[dict[str, Any]] = []
            keys = make_keys(url)
            try:
                for i in range(args.jobs):
                    rows.append(one_job(settings, digits, keys, args.budget, f"digits-{i}"))
                    r = rows[-1]
                    print(f"job {i + 1:2d}: {r['state']:9s} attempts {r['attempts']} models {r['models']} "
                          f"candidates {r['candidates']}/{r['candidates_logged']} device {r['device_seconds']:6.1f} s "
                          f"of {r['budget']} wall {r['wall_s']:6.1f} s {'ok' if r['ok'] else 'FAILED'}", flush=True)
            finally:
                worker.stop()
            files = blob_files(settings)
            db = Db(url)
            with db.factory() as s:
                dataset_keys = set(s.scalars(select(Dataset.blob_key)))
            db.engine.dispose()
    orphans = [f for f in files if f not in dataset_keys]
    summary = {"jobs": len(rows), "ok": sum(r["ok"] for r in rows), "blob_files": len(files),
               "blob_files_not_datasets": orphans, "dataset_files": len(files) - len(orphans)}
    print(f"\n{summary['ok']} of {summary['jobs']} killed jobs ended succeeded with one model per variant; "
          f"blob store: {len(files)} files, not datasets: {summary['blob_files_not_datasets']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    protocol.write(args.out, {"summary": summary, "jobs": rows, "budget_s": args.budget,
                              "date": time.strftime("%Y-%m-%d")}, run_record)


if __name__ == "__main__":
    main()
