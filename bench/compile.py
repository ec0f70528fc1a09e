"""Compilation's share of a job's budget, with JAX's persistent compilation cache off, cold and warm.

Each run is a real ``netsynth synthesize`` job (``workers.synthesize_cli``, the synthesis engine the workers run) in a
fresh process, on digits (scikit-learn's 1,797 images: the training part of ``bench/peers/datasets.py``'s split, written
as an ``.npz``) or SMS Spam (``DIR/sms_spam/data.csv`` as it is) at a time budget, with ``NETSYNTH_COMPILE_CACHE``:

* ``off``: no persistent cache (the figure before the cache);
* ``cold``: an empty cache folder of the (dataset, budget) pair: the job writes its programs there (and reads back
  those it compiles twice);
* ``warm``: the same folder again: a second job on the same data, as a worker's next job finds it;
* ``warm2``: the folder once more (a third job): a search decides what to train by what it measured, so a job may
  train a candidate the jobs before it did not reach, whose programs the second job still compiles.

A job's compile seconds are the seconds its process spent tracing, lowering and compiling programs (or reading
them back from the cache), from JAX's monitoring events (``core.compilation``): ``compile_seconds`` of its
``metrics.json``; the search log's ``compile_seconds`` are each trial's part. Share = compile seconds / budget.
Target: under 10 % of a 300 s budget on digits and SMS Spam (warm).

Usage: ``python bench/compile.py --data DIR [--datasets digits,sms] [--budgets 120,300,1200] [--modes off,cold,warm]
[--seed 0] [--out FILE]`` where DIR holds ``sms_spam/data.csv`` (the repository's ``../shared/data``). Rows are
merged into ``--out`` (replacing the same dataset, budget and mode).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import protocol
from core_throughput import TUNABLES
from peers import datasets
from synthesis_quality import environment

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "results" / "compile.json"
MODES = ("off", "cold", "warm", "warm2")
TARGET_SHARE = 0.10


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=datasets.SHARED_DATA, help="folder holding sms_spam/data.csv")
    p.add_argument("--datasets", default="digits,sms", help="comma-separated subset of digits,sms")
    p.add_argument("--budgets", default="120,300", help="comma-separated budgets in seconds (e.g. 120,300,1200)")
    p.add_argument("--modes", default="off,cold,warm", help="comma-separated subset of off,cold,warm,warm2 (warm "
                                                             "needs cold before it, or --work with its caches)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--work", type=Path, help="scratch folder for data, caches and job outputs (default: a "
                                              "temporary one, removed at the end)")
    protocol.add_busy(p)
    return p.parse_args(argv)


def dataset_file(name: str, data_dir: Path, seed: int, work: Path) -> Path:
    """The file a job on `name` uploads: digits' training part as an .npz, SMS Spam's CSV as it is."""
    if name == "digits":
        split = datasets.load("digits", seed)
        path = work / "digits.npz"
        np.savez(path, x=split.x_train, y=split.y_train)
        return path
    if name == "sms":
        return data_dir / datasets.TEXT_SETS["sms"] / "data.csv"
    raise ValueError(f"unknown dataset {name!r}")


def run_job(data: Path, budget: float, mode: str, cache: Path, out: Path, seed: int) -> dict[str, Any]:
    """One `netsynth synthesize` job in a fresh process; its compile seconds and what its search log says."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")
           and not k.startswith("JAX_PERSISTENT_CACHE")}
    env["NETSYNTH_COMPILE_CACHE"] = "off" if mode == "off" else str(cache)
    env["GLIBC_TUNABLES"] = os.environ.get("GLIBC_TUNABLES", TUNABLES)
    command = [sys.executable, "-m", "workers.synthesize_cli", str(data), "--budget", str(budget), "--out", str(out),
               "--seed", str(seed)]
    load_before, start = os.getloadavg()[0], time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=2 * budget + 600)
    wall = time.monotonic() - start
    row: dict[str, Any] = {"budget_s": budget, "mode": mode, "wall_s": round(wall, 1),
                           "load_avg_before": round(load_before, 2), "load_avg_after": round(os.getloadavg()[0], 2)}
    if done.returncode != 0:
        return {**row, "notes": f"failed (exit {done.returncode}): {done.stderr[-500:]}"}
    metrics = json.loads((out / "metrics.json").read_text())
    log = [json.loads(line) for line in (out / "search_log.jsonl").read_text().splitlines()]
    trials = [e for e in log if e.get("curve")]
    per_trial = [float(e.get("compile_seconds", 0.0)) for e in trials]
    compile_s = float(metrics["compile_seconds"])
    return {**row, "compile_s": round(compile_s, 2), "share": round(compile_s / budget, 4),
            "programs": metrics.get("compiled_programs"), "cache_hits": metrics.get("compile_cache_hits"),
            "cache_misses": metrics.get("compile_cache_misses"), "trials": len(trials),
            "search_compile_s": round(sum(per_trial), 2),
            "trial_compile_s": [round(s, 2) for s in per_trial],
            "trial_seconds": [round(float(e["seconds"]), 2) for e in trials],
            "test_accuracy": metrics.get("test_accuracy"), "job_seconds": metrics.get("seconds")}


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a text table, with each (dataset, budget)'s change from the cache off to warm."""
    lines = [f"{'dataset':<8}{'budget':>8}  {'cache':<6}{'compile s':>10}{'share':>8}{'programs':>9}{'hits':>6}"
             f"{'trials':>7}{'search':>8}{'test acc':>9}{'load':>6}  notes"]
    for r in rows:
        if "compile_s" not in r:
            lines.append(f"{r['dataset']:<8}{r['budget_s']:>7.0f}s  {r['mode']:<6}  {r.get('notes', '')}")
            continue
        acc = "-" if r.get("test_accuracy") is None else f"{r['test_accuracy']:.4f}"
        lines.append(f"{r['dataset']:<8}{r['budget_s']:>7.0f}s  {r['mode']:<6}{r['compile_s']:>10.1f}"
                     f"{100 * r['share']:>7.1f}%{r['programs'] or 0:>9}{r['cache_hits'] or 0:>6}{r['trials']:>7}"
                     f"{r['search_compile_s']:>8.1f}{acc:>9}{r['load_avg_before']:>6.1f}  {r.get('notes', '')}")
    return "\n".join(lines)


def merge(path: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows in `path` that `rows` do not replace (same dataset, budget and mode), then `rows`."""
    old = json.loads(path.read_text()).get("rows", []) if path.exists() else []
    fresh = {(r["dataset"], r["budget_s"], r["mode"]) for r in rows}
    return [r for r in old if (r.get("dataset"), r.get("budget_s"), r.get("mode")) not in fresh] + rows


def main(argv: list[str] | None = None) -> None:
    """Run every (dataset, budget, mode) job one after another, print the table, write the JSON."""
    args = parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES) or (args.work is None and {"warm", "warm2"} & set(modes) and "cold" not in modes):
        raise SystemExit(f"--modes: a subset of {','.join(MODES)}; warm needs cold (or --work with its caches)")
    run = protocol.start(args.busy)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        files = {name: dataset_file(name, args.data, args.seed, work) for name in args.datasets.split(",")}
        for budget in (float(b) for b in args.budgets.split(",")):
            for name, data in files.items():
                cache = work / f"cache-{name}-{budget:.0f}"
                for mode in modes:
                    out = work / f"job-{name}-{budget:.0f}-{mode}"
                    row = {"dataset": name, **run_job(data, budget, mode, cache, out, args.seed),
                           "protocol": protocol.stamp({}, run)}  # merged rows keep their own run's record
                    rows.append(row)
                    print(table([row]).splitlines()[-1], flush=True)
                    write(args.out, rows, run)  # what ran so far survives an interruption
    print(table(rows))
    print(f"written to {args.out.resolve().relative_to(ROOT) if args.out.resolve().is_relative_to(ROOT) else args.out}")


def write(path: Path, rows: list[dict[str, Any]], run: dict[str, Any]) -> None:
    """Merge `rows` into the JSON at `path`, with the machine they ran on and the run's record (bench/protocol.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"environment": environment(), "target_share": TARGET_SHARE, "rows": merge(path, rows)}
    protocol.write(path, doc, run, indent=1)


if __name__ == "__main__":
    main()
