"""Scaling, simulated: 8, 64 and 512 workers serving many jobs, fed with what `bench/scale.py` measured.

A discrete-event simulation in plain Python (`heapq`; SimPy is not installed and not needed). Jobs arrive as a
Poisson process at the rate that offers `--load` of the workers' capacity, each with a time budget drawn from a
mix (`BUDGETS`); a job's search runs for `search_fraction` of its budget, and its coordinator keeps up to
`--per-job` candidate trainings in one FIFO queue shared by all jobs. A free worker takes the oldest queued
trial (one whose job's search has ended is dropped: cancelled); a trial lasts a lognormal time around the
measured seconds per candidate and ends at its search's end at the latest; the coordinator learns of it at its
next poll (every `poll_s`) and sends a new one. Counted over the simulated time after a warm-up: worker
utilisation, queue wait, and the control plane's load, from the measured per-candidate figures and the code's
own intervals (`Design`):

* PostgreSQL transactions: every active job's monitor writes (measured per job-second on one worker), the
  coordinator's poll of its trial rows (one transaction per `poll_s`), each running trial's "still wanted?"
  check (`workers.subtask._watch`, one per `watch_s`), and a fixed count per trial (the row's insert, claim
  and report, and the candidate event).
* Redis commands: per trial the message, its delivery and the acks_late bookkeeping of kombu's Redis transport;
  an idle worker's BRPOP every `brpop_s`; and every `refresh_s` each coordinator counts the idle workers with
  three Celery remote-control broadcasts that every worker answers (`workers.executor.idle_processes`).
* Coordinator CPU per job: the measured CPU of a poll, of a submit, and of decoding a checkpoint that beats the
  best so far, plus the inspect replies it reads.

Each resource's demand is compared with a stated capacity (`Capacities`, with the reasoning); the bottleneck is
the control-plane resource nearest its capacity, and the limit is the worker count where it reaches it (from
the mean-value model `expected`, which the simulation checks at 8-512 workers). One improvement is modelled:
`Design.improved()`. Deterministic for a seed. Prints a table; writes `bench/results/simulate_scale.json`.

Usage: ``python bench/simulate_scale.py [--scale bench/results/scale.json] [--seed 0] [--load 0.8] [--per-job 8]``
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import protocol

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCALE = ROOT / "bench" / "results" / "scale.json"
DEFAULT_OUT = ROOT / "bench" / "results" / "simulate_scale.json"
BUDGETS: tuple[tuple[float, float], ...] = ((60.0, 0.5), (300.0, 0.3), (1800.0, 0.2))
"""Job budgets in seconds and their shares of the arrivals: many short jobs, a few long ones."""


@dataclass(frozen=True)
class Measured:
    """Per-candidate times and overheads from `bench/scale.py` (defaults: its quick run's order of magnitude)."""

    train_s: float = 12.0  # seconds one candidate trains (one worker)
    train_cv: float = 0.5  # coefficient of variation of that time (assumed: the search mixes small and big nets)
    search_fraction: float = 0.5  # the share of a job's budget its search runs
    pg_job_tps: float = 3.7  # PostgreSQL transactions per second of one running job (monitor, heartbeat, events)
    submit_ms: float = 1.2  # coordinator CPU to send one trial (row + message)
    poll_ms: float = 0.8  # coordinator CPU of one poll of its trial rows
    decode_ms: float = 1.4  # coordinator CPU to decode one trial's weights (only for a new best)
    weight_bytes: float = 1.5e6  # bytes of trial weights stored per remote trial
    source: str = "defaults"

    @classmethod
    def from_scale(cls, path: Path) -> Measured:
        """The figures of `bench/scale.py`'s results: seconds per candidate pooled over every phase's jobs (a few
        candidates each), a job's transactions per second from the 1-worker phase (no remote trials), the
        coordinator's CPU and the weight bytes from the 2-workers-1-job phase (the one that sends trials)."""
        doc = json.loads(path.read_text())
        phases = {p["name"]: p for p in doc["phases"]}
        one, two = phases["1 worker, 1 job"], phases["2 workers, 1 job"]
        jobs = [j for p in doc["phases"] for j in p["jobs"] if j["trained"]]
        searched = [j["search_s"] for j in jobs if j["search_s"]]
        coord = two["coordinator_cpu"]
        budget = float(doc["settings"]["budget_s"])
        return cls(train_s=sum(j["train_s"] for j in jobs) / sum(j["trained"] for j in jobs),
                   search_fraction=sum(searched) / len(searched) / budget if searched else cls.search_fraction,
                   pg_job_tps=float(one["postgres"]["transactions_per_s"]),
                   submit_ms=float(coord["submit_ms"]), poll_ms=float(coord["poll_ms"]),
                   decode_ms=float(coord["decode_ms"] or cls.decode_ms),
                   weight_bytes=float(two["blobs"]["bytes_per_remote_trial"] or cls.weight_bytes),
                   source=f"{path.name} ({doc['settings']['date']}, budget {budget:.0f} s, {len(jobs)} jobs)")


@dataclass(frozen=True)
class Design:
    """The control plane's intervals and per-trial counts, from the code (the improvement changes some)."""

    poll_s: float = 0.25  # synthesis.search.POLL_S: the coordinator reads its trial rows this often
    watch_s: float = 1.0  # workers.subtask._watch: a running trial reads its row this often
    watch_in_redis: bool = False  # whether that check reads a Redis key instead (one command, no transaction)
    pg_per_trial: float = 4.0  # insert (submit), claim, report (workers.subtask), candidate event (monitor)
    redis_per_trial: float = 10.0  # LPUSH; BRPOP; MULTI/ZADD/HSET/EXEC to hold it unacked; MULTI/ZREM/HDEL/EXEC
    brpop_s: float = 1.0  # an idle worker's BRPOP times out and is sent again this often (kombu's default)
    refresh_s: float = 30.0  # CeleryExecutor.refresh_s: how often a coordinator counts the idle workers
    broadcasts: int = 3  # idle_processes: active_queues, then stats and active: each answered by every worker
    redis_per_reply: float = 3.0  # a reply: the worker's PUBLISH/LPUSH, the coordinator's read, its queue expiry
    wake_s: float | None = None  # the longest a coordinator takes to notice a finished trial (None: poll_s)
    reply_ms: float = 0.1  # coordinator CPU to decode one remote-control reply (assumed; not measured)
    decode_share: float = 0.2  # share of trials that beat the best so far, so their weights are decoded (assumed)
    name: str = "as built"

    def improved(self) -> Design:
        """The improvement: workers keep one shared idle counter in Redis (INCR when a pool process goes idle, DECR
        when it takes a task) and a coordinator reads it with one GET, instead of three remote-control broadcasts
        that every worker answers; each trial costs two commands more."""
        return replace(self, broadcasts=0, redis_per_trial=self.redis_per_trial + 2.0, name="idle counter")

    def notified(self) -> Design:
        """The next step, for what then limits (PostgreSQL): a trial row's report sends NOTIFY, which wakes its
        coordinator (a poll every 5 s only as a fallback), and a running trial learns of its cancellation from a
        Redis key read every 10 s instead of its row every second."""
        return replace(self.improved(), poll_s=5.0, wake_s=0.05, watch_s=10.0, watch_in_redis=True,
                       name="idle counter + NOTIFY")

    def wake(self) -> float:
        """The longest a coordinator takes to notice a finished trial."""
        return self.poll_s if self.wake_s is None else self.wake_s


@dataclass(frozen=True)
class Capacities:
    """What one server of each kind sustains (assumptions; see `ASSUMPTIONS`)."""

    postgres_tps: float = 10_000.0
    redis_ops: float = 100_000.0
    coordinator_cpu: float = 1.0  # one coordinator is one Python process: at most one core


ASSUMPTIONS = {
    "postgres_tps": "10,000 small transactions/s on one PostgreSQL server: pgbench's TPC-B-like write transaction "
                    "(5 statements) reaches roughly 10-30k tps on a current 16-32-core server with NVMe and "
                    "synchronous commit; ours are 1-3 statements on JSON rows, and the server also answers the "
                    "API's reads, so the low end is taken",
    "redis_ops": "100,000 commands/s: Redis executes commands on one thread; redis-benchmark without pipelining "
                 "gives 100-200k simple ops/s on a current core, less for Lua (EVALSHA) and MULTI blocks",
    "coordinator_cpu": "1 core: a job's coordinator is one Python process (the GIL)",
    "reply_ms": "0.1 ms of coordinator CPU per remote-control reply (JSON of a few hundred bytes; not measured)",
    "decode_share": "20 % of trials beat the best so far and have their weights decoded (not measured)",
    "train_cv": "trial times lognormal with a coefficient of variation of 0.5 around the measured mean",
    "gpu": "a GPU worker trains a candidate in the measured seconds (1 CPU core); --speedup divides them",
}


@dataclass(frozen=True)
class Scenario:
    workers: int
    load: float = 0.8  # offered trial-seconds per second, as a share of the workers
    per_job: int = 8  # trials one job's coordinator keeps queued or running
    speedup: float = 1.0  # a worker trains this many times faster than the measured core
    horizon_s: float = 4 * 3600.0
    warmup_s: float = 3600.0
    seed: int = 0
    budgets: tuple[tuple[float, float], ...] = BUDGETS


def mean_search_s(s: Scenario, m: Measured) -> float:
    return sum(b * p for b, p in s.budgets) * m.search_fraction


def arrival_rate(s: Scenario, m: Measured) -> float:
    """Jobs per second that offer `s.load` of the workers: each job keeps `per_job` trials out for its search."""
    return s.load * s.workers / (s.per_job * mean_search_s(s, m))


@dataclass
class _Job:
    end: float  # when its search ends
    out: int = 0  # trials queued or running
    trials: int = 0


@dataclass
class Totals:
    """What happened inside the measured window (after the warm-up)."""

    busy_s: float = 0.0
    job_s: float = 0.0  # job-seconds of searches running
    issued: int = 0
    started: int = 0
    completed: int = 0
    cancelled: int = 0  # dropped from the queue: their search ended first
    waits: list[float] = field(default_factory=list)


def _lognormal(rng: random.Random, mean: float, cv: float) -> float:
    sigma = math.sqrt(math.log(1 + cv * cv))
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


def simulate(s: Scenario, m: Measured, d: Design, cap: Capacities) -> dict[str, Any]:
    """Run one scenario; its utilisation, queue wait, control-plane rates and conservation counts."""
    # separate streams, so that designs compared at one seed see the same jobs and trial times
    rng, durations, delays = (random.Random(f"{s.seed}-{stream}") for stream in ("jobs", "trials", "polls"))
    lam = arrival_rate(s, m)
    mean_train = m.train_s / s.speedup
    t0, t1 = s.warmup_s, s.horizon_s
    tot = Totals()
    all_issued = all_started = all_completed = all_cancelled = 0
    events: list[tuple[float, int, str, int]] = []  # (time, tie-break, kind, job id)
    seq = 0
    jobs: dict[int, _Job] = {}
    queue: deque[tuple[int, float]] = deque()  # (job id, enqueued at)
    free = s.workers

    def push(at: float, kind: str, job: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, job))

    def overlap(a: float, b: float) -> float:
        return max(0.0, min(b, t1) - max(a, t0))

    def issue(now: float, jid: int) -> None:
        nonlocal all_issued
        job = jobs[jid]
        while job.out < s.per_job and now < job.end:
            job.out += 1
            job.trials += 1
            all_issued += 1
            tot.issued += t0 <= now < t1
            queue.append((jid, now))

    def dispatch(now: float) -> None:
        nonlocal free, all_started, all_cancelled
        while free and queue:
            jid, at = queue.popleft()
            job = jobs[jid]
            if now >= job.end:  # its search is over: the trial is dropped
                job.out -= 1
                all_cancelled += 1
                tot.cancelled += t0 <= now < t1
                continue
            free -= 1
            all_started += 1
            if t0 <= now < t1:
                tot.started += 1
                tot.waits.append(now - at)
            end = min(now + _lognormal(durations, mean_train, m.train_cv), job.end)
            tot.busy_s += overlap(now, end)
            push(end, "done", jid)

    push(rng.expovariate(lam), "arrive", -1)
    next_id = 0
    while events:
        now, _, kind, jid = heapq.heappop(events)
        if now >= t1:
            break
        if kind == "arrive":
            budget = rng.choices([b for b, _ in s.budgets], [p for _, p in s.budgets])[0]
            search = budget * m.search_fraction
            jobs[next_id] = _Job(end=now + search)
            tot.job_s += overlap(now, now + search)
            issue(now, next_id)
            next_id += 1
            push(now + rng.expovariate(lam), "arrive", -1)
        elif kind == "done":
            free += 1
            all_completed += 1
            tot.completed += t0 <= now < t1
            jobs[jid].out -= 1
            push(now + delays.uniform(0.0, d.wake()), "poll", jid)  # the coordinator sees it at its next poll
        elif kind == "poll":
            issue(now, jid)
        dispatch(now)
    in_flight = sum(j.out for j in jobs.values())
    return summarise(s, m, d, cap, tot, {
        "issued": all_issued, "started": all_started, "completed": all_completed, "cancelled": all_cancelled,
        "queued_or_running_at_end": in_flight, "jobs": next_id})


def control_plane(s: Scenario, m: Measured, d: Design, *, job_s: float, busy_s: float, trials: float,
                  seconds: float) -> dict[str, float]:
    """Rates of PostgreSQL transactions, Redis commands and coordinator CPU for the given job-seconds, trial-seconds
    and trials over `seconds` (shared by the simulation and the mean-value model)."""
    jobs = job_s / seconds  # mean searches running at once
    running = busy_s / seconds  # mean trials running at once
    rate = trials / seconds  # trials ended per second
    idle = max(s.workers - running, 0.0)
    watches = running / d.watch_s
    pg = jobs * (m.pg_job_tps + 1 / d.poll_s) + (0.0 if d.watch_in_redis else watches) + rate * d.pg_per_trial
    replies = d.broadcasts * (1 + s.workers) / d.refresh_s  # per job per second
    redis = rate * d.redis_per_trial + idle / d.brpop_s + jobs * replies * d.redis_per_reply + (
        watches if d.watch_in_redis else 0.0)
    per_job_rate = rate / jobs if jobs else 0.0
    coord_ms = (1 / d.poll_s) * m.poll_ms + replies * d.reply_ms + per_job_rate * (
        m.submit_ms + d.decode_share * m.decode_ms)
    return {"jobs_running": jobs, "postgres_tps": pg, "redis_ops": redis, "coordinator_cpu_per_job": coord_ms / 1000,
            "coordinator_cpu_total": jobs * coord_ms / 1000, "weight_bytes_per_s": rate * m.weight_bytes}


def utilisations(rates: dict[str, float], cap: Capacities) -> dict[str, float]:
    """Each control-plane resource's demand as a share of its capacity."""
    return {"postgres": rates["postgres_tps"] / cap.postgres_tps, "redis": rates["redis_ops"] / cap.redis_ops,
            "coordinator": rates["coordinator_cpu_per_job"] / cap.coordinator_cpu}


def bottleneck(util: dict[str, float]) -> str:
    """The resource nearest (or past) its capacity."""
    return max(util, key=util.__getitem__)


def summarise(s: Scenario, m: Measured, d: Design, cap: Capacities, tot: Totals,
              counts: dict[str, int]) -> dict[str, Any]:
    seconds = s.horizon_s - s.warmup_s
    rates = control_plane(s, m, d, job_s=tot.job_s, busy_s=tot.busy_s, trials=tot.completed, seconds=seconds)
    util = utilisations(rates, cap)
    waits = sorted(tot.waits)
    return {"workers": s.workers, "design": d.name, "arrivals_per_s": arrival_rate(s, m),
            "worker_utilisation": tot.busy_s / (s.workers * seconds),
            "queue_wait_mean_s": sum(waits) / len(waits) if waits else 0.0,
            "queue_wait_p99_s": waits[min(len(waits) - 1, int(0.99 * len(waits)))] if waits else 0.0,
            "trials_per_s": tot.completed / seconds, "window": asdict(tot) | {"waits": len(waits)},
            "counts": counts, **rates, "utilisation": util, "bottleneck": bottleneck(util)}


def expected(workers: float, s: Scenario, m: Measured, d: Design) -> dict[str, float]:
    """The mean-value model of the same system at `workers` (steady state, offered load below 1): the rates the
    simulation would count, without simulating."""
    w = replace(s, workers=max(1, round(workers)))
    lam = arrival_rate(w, m)
    job_s = lam * mean_search_s(w, m)
    running = s.load * w.workers
    return control_plane(w, m, d, job_s=job_s, busy_s=running, trials=running * s.speedup / m.train_s, seconds=1.0)


def limit(resource: str, s: Scenario, m: Measured, d: Design, cap: Capacities, top: float = 1e7) -> float | None:
    """The worker count at which `resource` reaches its capacity (bisection on the mean-value model), None when
    not below `top`; 0 when it is past capacity at one worker."""
    def util(n: float) -> float:
        return utilisations(expected(n, s, m, d), cap)[resource]
    if util(1) >= 1:
        return 0.0
    if util(top) < 1:
        return None
    lo, hi = 1.0, top
    while hi - lo > 1:
        mid = math.sqrt(lo * hi) if hi / lo > 2 else (lo + hi) / 2
        lo, hi = (mid, hi) if util(mid) < 1 else (lo, mid)
    return hi


def limits(s: Scenario, m: Measured, d: Design, cap: Capacities) -> dict[str, float | None]:
    return {r: limit(r, s, m, d, cap) for r in ("postgres", "redis", "coordinator")}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=Path, default=DEFAULT_SCALE, help="bench/scale.py's results")
    p.add_argument("--workers", type=int, nargs="+", default=[8, 64, 512])
    p.add_argument("--load", type=float, default=0.8)
    p.add_argument("--per-job", type=int, default=8)
    p.add_argument("--speedup", type=float, default=1.0, help="a GPU worker's speed against the measured core")
    p.add_argument("--hours", type=float, default=4.0,
                   help="simulated time, the first hour a warm-up (longer below 64 workers)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    protocol.add_busy(p)
    return p.parse_args(argv)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("workers", "design", "util", "wait mean/p99 s", "trials/s", "PG tx/s", "Redis ops/s",
            "coord CPU/job", "coord CPU all", "bottleneck (share)")
    lines = [head]
    for r in rows:
        lines.append((str(r["workers"]), r["design"], f"{r['worker_utilisation']:.3f}",
                      f"{r['queue_wait_mean_s']:.2f} / {r['queue_wait_p99_s']:.1f}", f"{r['trials_per_s']:.2f}",
                      _fmt(r["postgres_tps"]), _fmt(r["redis_ops"]), f"{r['coordinator_cpu_per_job']:.4f}",
                      f"{r['coordinator_cpu_total']:.2f}",
                      f"{r['bottleneck']} ({r['utilisation'][r['bottleneck']]:.3f})"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_record = protocol.start(args.busy)  # refuses on a busy machine (its "seconds" are a timing)
    m = Measured.from_scale(args.scale) if args.scale.exists() else Measured()
    cap, base = Capacities(), Design()
    designs = [base, base.improved(), base.notified()]
    started = time.perf_counter()
    rows, limit_rows = [], []
    for d in designs:
        for n in args.workers:
            hours = args.hours * max(1.0, 64 / n)  # few workers see few jobs: a longer time evens them out
            s = Scenario(n, load=args.load, per_job=args.per_job, speedup=args.speedup, horizon_s=hours * 3600,
                         seed=args.seed)
            rows.append(simulate(s, m, d, cap))
        for speedup in sorted({args.speedup, 10.0}):
            s = Scenario(1, load=args.load, per_job=args.per_job, speedup=speedup)
            found = limits(s, m, d, cap)
            first = min((r for r in found if found[r] is not None), key=lambda r: found[r] or 0.0, default=None)
            limit_rows.append({"design": d.name, "speedup": speedup, "workers_at_capacity": found,
                               "first": first})
    print(f"measured inputs: {m.source}: {m.train_s:.1f} s per candidate, search {m.search_fraction:.0%} of the "
          f"budget, {m.pg_job_tps} PG tx/s per job, coordinator submit {m.submit_ms} / poll {m.poll_ms} / "
          f"decode {m.decode_ms} ms")
    print(table(rows))
    print("\nworkers at which each resource reaches its capacity (mean-value model):")
    for r in limit_rows:
        at = ", ".join(f"{k} {_fmt(v) if v is not None else '> 10M'}" for k, v in r["workers_at_capacity"].items())
        print(f"  {r['design']:<30} speed-up {r['speedup']:>4g}: {at}; first: {r['first']}")
    elapsed = time.perf_counter() - started
    print(f"simulated in {elapsed:.1f} s")
    result = {"measured": asdict(m), "designs": [asdict(d) for d in designs],
              "capacities": asdict(cap), "assumptions": ASSUMPTIONS, "budgets": BUDGETS,
              "settings": {k: (os.path.relpath(v, ROOT) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "rows": rows, "limits": limit_rows, "seconds": round(elapsed, 2)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    protocol.write(args.out, result, run_record)


if __name__ == "__main__":
    main()
