"""netsynth side by side with the alternatives a user would pick instead: same training data, same budget.

Systems (``bench/README.md`` says how each is configured):

* ``netsynth``: ``synthesis.engine.synthesize`` in-process on the training part (it splits off its own
  validation and test rows from it) under ``Budget(seconds=...)``; the delivered ONNX model is scored with
  ``domain.onnx_run.OnnxClassifier`` on the benchmark's held-out test part. Texts are encoded as a job encodes
  them (``workers.data.text_task``): the vocabulary is learned from the engine's training rows only.
* ``hand_cnn`` (images): a small CNN written by hand in PyTorch (CPU), ``bench/peers/hand_cnn.py``, given the
  whole budget; ``hand_cnn_half`` the same given half of it (the fair peer of a job that must also search,
  compress and explain).
* ``netsynth_best_so_far``: netsynth whose search ranks trials by their best validation accuracy so far instead of
  the learning-curve extrapolation (``synthesis.curves.predict_final``): the ablation that decides whether the
  extrapolation stays.
* ``tfidf`` (text): TF-IDF word + character n-grams and logistic regression, ``bench/peers/tfidf.py``.
* ``autokeras``: AutoKeras 3.0.0 in its own virtual environment (``--autokeras-python``), through
  ``bench/peers/autokeras_runner.py``; skipped, with a note, when that interpreter is missing.

Every (dataset, system) pair runs in a fresh child process, one after another, with XLA's CPU flags from
``core.kernels.CPU_XLA_FLAGS`` and glibc's raised malloc thresholds (as ``bench/core_throughput.py``).
Datasets and splits: ``bench/peers/datasets.py``. Default budgets: digits 120 s, SMS Spam 300 s, MNIST
1,200 s (``--scale`` multiplies them). Rows are merged into ``--out`` (replacing the same dataset and system).

Usage: ``python bench/synthesis_quality.py [--images | --text] [--datasets digits,sms,mnist] [--systems netsynth,
hand_cnn,tfidf,autokeras] [--budget S | --scale 1] [--seed 0] [--autokeras-python /tmp/ak-venv/bin/python] [--quick]
[--out FILE]``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import protocol
from core_throughput import TUNABLES
from peers import datasets

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "synthesis_quality.json"
QUICK_OUT = Path(tempfile.gettempdir()) / "synthesis_quality_quick.json"
BUDGETS = {"digits": 120.0, "sms": 300.0, "mr": 300.0, "cr": 300.0, "mpqa": 300.0, "mnist": 1200.0,
           "cifar10_small": 1200.0}
QUICK_BUDGETS = {"digits": 30.0, "sms": 40.0, "mr": 40.0, "cr": 40.0, "mpqa": 40.0, "mnist": 60.0,
                 "cifar10_small": 60.0}
SYSTEMS = {"image": ("netsynth", "netsynth_best_so_far", "hand_cnn_half", "hand_cnn", "autokeras"),
           "text": ("netsynth", "netsynth_best_so_far", "tfidf", "autokeras")}
ALL_SYSTEMS = ("netsynth", "hand_cnn_half", "hand_cnn", "tfidf", "autokeras")
"""The systems run by default (``netsynth_best_so_far``, the ablation, only when named)."""
BUDGET_SHARE = {"hand_cnn_half": 0.5}
"""Systems given a share of the dataset's budget (the others get all of it)."""
IMAGE_SETS = "cifar10_small,mnist,digits"
TEXT_SETS = "sms,mr,cr,mpqa"
DEFAULT_SETS = "digits,sms,mnist"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", help=f"comma-separated subset of {','.join(BUDGETS)} (default {DEFAULT_SETS})")
    p.add_argument("--images", action="store_true", help=f"the image systems, on the image sets ({IMAGE_SETS}) "
                   "unless --datasets names some")
    p.add_argument("--text", action="store_true", help=f"the text systems, on the text sets ({TEXT_SETS}) unless "
                   "--datasets names some")
    p.add_argument("--budget", type=float, help="one budget in seconds for every dataset (instead of --scale)")
    p.add_argument("--data", type=Path, default=datasets.SHARED_DATA, help="the shared data folder")
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS), help="comma-separated subset of the default")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every budget")
    p.add_argument("--seed", type=int, default=0, help="split seed and every system's seed")
    p.add_argument("--autokeras-python", type=Path, default=Path("/tmp/ak-venv/bin/python"))
    p.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, MNIST subset, output in /tmp")
    p.add_argument("--out", type=Path, help=f"result file (default {DEFAULT_OUT.relative_to(HERE.parent)})")
    p.add_argument("--log-dir", type=Path, default=Path(tempfile.gettempdir()) / "synthesis_quality_logs")
    p.add_argument("--one", help=argparse.SUPPRESS)  # child mode: DATASET:SYSTEM
    p.add_argument("--budget-s", type=float, help=argparse.SUPPRESS)
    p.add_argument("--row-out", type=Path, help=argparse.SUPPRESS)
    protocol.add_busy(p)
    return p.parse_args(argv)


# ------------------------------------------------------------------------------ the systems


class LogMonitor:
    """A synthesis monitor that writes stages and events to stderr (the child's log), with the seconds since
    it was made."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def stage(self, name: str) -> None:
        """Log a stage."""
        print(f"[netsynth {time.monotonic() - self._start:7.1f}s] stage {name}", file=sys.stderr, flush=True)

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        """Progress is not logged."""

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Log an event, shortened (a candidate: its origin, outcome and scores)."""
        if kind == "candidate":
            payload = {k: payload.get(k) for k in ("index", "id", "origin", "status", "epochs", "accuracy",
                                                    "predicted", "loss", "params")}
        print(f"[netsynth {time.monotonic() - self._start:7.1f}s] {kind} {json.dumps(payload, default=str)[:300]}",
              file=sys.stderr, flush=True)


def job_task(split: datasets.Split, seed: int) -> tuple[Any, np.ndarray]:
    """``(task, x_test)``: the engine's task on the split's training part (text: the vocabulary learned from it, as
    in a job; images: exact duplicates grouped) and the test inputs encoded as the model takes them."""
    from synthesis.interface import Task
    from workers.data import text_task

    if split.modality == "text":
        task, encoder = text_task(list(split.x_train), split.y_train, len(split.classes), seed, test_fraction=0.0)
        return task, encoder.encode(list(split.x_test))
    rows = split.x_train.reshape(len(split.x_train), -1)
    groups = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)  # exact duplicates together
    return Task("image", split.x_train, split.y_train, len(split.classes), groups=groups), split.x_test


def run_netsynth(split: datasets.Split, budget_s: float, seed: int) -> dict[str, Any]:
    """Synthesize on the training part, score the delivered ONNX model on the test part (its error and its expected
    calibration error)."""
    from domain.onnx_run import OnnxClassifier
    from synthesis.budget import Budget
    from synthesis.engine import synthesize
    from synthesis.explain.summary import calibration
    from synthesis.interface import Options

    start = time.monotonic()
    task, x_test = job_task(split, seed)
    # the held-out test rows are ours: netsynth trains and validates on all of the training rows
    result = synthesize(task, Budget(seconds=budget_s), Options(seed=seed, test_fraction=0.0), LogMonitor())
    wall_s = time.monotonic() - start
    proba = OnnxClassifier(result.model.onnx).predict_proba(x_test)
    predicted = proba.argmax(axis=1)
    metrics = result.model.metrics
    return {"test_error": float(np.mean(predicted != split.y_test)), "params": result.model.param_count,
            "wall_s": wall_s, "test_ece": round(calibration(proba, split.y_test)["ece"], 4),
            "details": {"trials": len(result.log), "stop_reason": result.stop_reason, "split": result.split,
                        "synthesize_s": round(result.seconds, 1), "spec": result.model.spec.get("name"),
                        **{k: metrics.get(k) for k in ("val_accuracy", "refit", "test_accuracy", "macs", "latency_ms",
                                                       "time_spent")},
                        "search": [{k: t.get(k) for k in ("id", "status", "epochs", "seconds", "accuracy")}
                                   for t in result.log]}}


def run_autokeras(split: datasets.Split, budget_s: float, seed: int, python: Path, log: Path) -> dict[str, Any]:
    """Run bench/peers/autokeras_runner.py in AutoKeras's own interpreter on the same split."""
    if not python.exists():
        return {"test_error": None, "params": None, "wall_s": None,
                "notes": f"skipped: no AutoKeras interpreter at {python} (see bench/README.md)"}
    with tempfile.TemporaryDirectory(prefix="ak-bench-") as tmp:
        data, out = Path(tmp) / "data.npz", Path(tmp) / "result.json"
        np.savez(data, x_train=split.x_train, y_train=split.y_train, x_test=split.x_test, y_test=split.y_test)
        command = [str(python), str(HERE / "peers" / "autokeras_runner.py"), "--data", str(data),
                   "--budget", str(budget_s), "--seed", str(seed), "--out", str(out)]
        with log.open("a") as sink:
            subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, check=True,
                           env={**os.environ, "KERAS_BACKEND": "jax"}, timeout=child_timeout(budget_s))
        result: dict[str, Any] = json.loads(out.read_text())
    trials = result.pop("trials")
    result["details"] = {"trials": len(trials), "versions": result.pop("versions"),
                         "best": min(trials, key=lambda t: t["val_loss"] if t["val_loss"] is not None else 1e9)}
    return result


def run_one(dataset: str, system: str, budget_s: float, args: argparse.Namespace) -> dict[str, Any]:
    """Child mode: load the split, run one system, return its row."""
    split = datasets.load(dataset, args.seed, quick=args.quick, data_dir=args.data)
    if system in ("netsynth", "netsynth_best_so_far"):
        if system == "netsynth_best_so_far":  # the ablation: trials ranked by what they measured so far
            from synthesis import curves, search

            search.predict_final = curves.best_so_far  # type: ignore[attr-defined,assignment]
        result = run_netsynth(split, budget_s, args.seed)
    elif system in ("hand_cnn", "hand_cnn_half"):
        from peers import hand_cnn

        result = hand_cnn.train_and_score(split.x_train, split.y_train, split.x_test, split.y_test, budget_s,
                                          args.seed, flip=dataset in datasets.MIRRORABLE)
    elif system == "tfidf":
        from peers import tfidf

        result = tfidf.train_and_score(list(split.x_train), split.y_train, list(split.x_test), split.y_test,
                                       args.seed)
    else:
        result = run_autokeras(split, budget_s, args.seed, args.autokeras_python, args.row_out.with_suffix(".ak.log"))
    return {"train_size": len(split.y_train), "test_size": len(split.y_test), **result}


# ------------------------------------------------------------------------------ the run


def child_timeout(budget_s: float) -> float:
    """Seconds after which a system that overran its budget is killed."""
    return 1.5 * budget_s + 300


def run_child(dataset: str, system: str, budget_s: float, args: argparse.Namespace) -> dict[str, Any]:
    """Run one (dataset, system) pair in a fresh process; a failure or a kill becomes a row with a note."""
    args.log_dir.mkdir(parents=True, exist_ok=True)
    log, row_out = args.log_dir / f"{dataset}-{system}.log", args.log_dir / f"{dataset}-{system}.json"
    log.unlink(missing_ok=True)
    row_out.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--one", f"{dataset}:{system}", "--budget-s", str(budget_s),
               "--row-out", str(row_out), "--seed", str(args.seed), "--data", str(args.data),
               "--autokeras-python", str(args.autokeras_python),
               *(["--quick"] if args.quick else [])]
    env = {**os.environ, "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES", TUNABLES)}
    row: dict[str, Any] = {"test_error": None, "params": None, "wall_s": None}
    try:
        with (args.log_dir / f"{dataset}-{system}.out").open("w") as sink:
            done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                  timeout=child_timeout(budget_s) + 60)
        if done.returncode == 0:
            row = json.loads(row_out.read_text())
        else:
            row["notes"] = f"failed (exit {done.returncode}); log {args.log_dir}/{dataset}-{system}.out"
    except subprocess.TimeoutExpired:
        row["notes"] = f"killed after {child_timeout(budget_s) + 60:.0f} s"
    return row


QUIET_LOAD = 1.0
"""The 1-minute load average a system waits for before it starts (at most `QUIET_WAIT_S`): the load the previous
system left decays, so no row is measured on the tail of another."""
QUIET_WAIT_S = 120.0


def wait_for_quiet() -> None:
    """Wait until the 1-minute load average is below `QUIET_LOAD`, or `QUIET_WAIT_S` have passed."""
    waited = 0.0
    while os.getloadavg()[0] >= QUIET_LOAD and waited < QUIET_WAIT_S:
        time.sleep(5.0)
        waited += 5.0


def environment() -> dict[str, Any]:
    """The machine and versions the rows were measured with."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    spec = importlib.util.find_spec("synthesis")  # the netsynth the children import (HERE may be a copy)
    repo = Path(spec.origin).parents[1] if spec and spec.origin else HERE.parent
    git = ["git", "-C", str(repo)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "core", "synthesis"], capture_output=True, text=True).stdout
    return {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "cores": cores,
            "python": platform.python_version(), "machine": platform.machine(), "load_avg": os.getloadavg()[0],
            "load_average_before": list(os.getloadavg()),
            "commit": commit + ("+local changes to core/synthesis" if dirty.strip() else "")}


def merge(path: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows in `path` that `rows` do not replace (same dataset, system and split seed), then `rows`."""
    old = json.loads(path.read_text()) if path.exists() else []
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r.get("dataset"), r.get("system"), r.get("seed", 0), r.get("job_budget_s", r.get("budget_s"))

    fresh = {key(r) for r in rows}
    return [r for r in old if isinstance(r, dict) and key(r) not in fresh] + rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a text table."""
    lines = [f"{'dataset':<14}{'seed':>5}{'budget':>8}  {'system':<10}{'test error':>11}{'params':>11}{'wall s':>9}"
             "  notes"]
    for r in rows:
        err = "-" if r["test_error"] is None else f"{100 * r['test_error']:.2f} %"
        params = "-" if r["params"] is None else f"{r['params']:,}"
        wall = "-" if r["wall_s"] is None else f"{r['wall_s']:.0f}"
        lines.append(f"{r['dataset']:<14}{r.get('seed', 0):>5}{r['budget_s']:>7.0f}s  {r['system']:<10}{err:>11}"
                     f"{params:>11}{wall:>9}  "
                     f"{r.get('notes', '')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run every selected (dataset, system) pair one after another, print the table, write the JSON."""
    args = parse_args(argv)
    if args.one:
        from core.kernels import CPU_XLA_FLAGS  # imports jax; XLA reads its flags when the backend starts

        os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *CPU_XLA_FLAGS]).strip()
        dataset, system = args.one.split(":")
        args.row_out.write_text(json.dumps(run_one(dataset, system, args.budget_s, args), default=str) + "\n")
        return
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    budgets = QUICK_BUDGETS if args.quick else BUDGETS
    systems = args.systems.split(",")
    if args.images or args.text:
        modality = "image" if args.images else "text"
        args.datasets = args.datasets or (IMAGE_SETS if args.images else TEXT_SETS)
        systems = [s for s in systems if s in SYSTEMS[modality]]
    args.datasets = args.datasets or DEFAULT_SETS
    rows: list[dict[str, Any]] = []
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    for dataset in args.datasets.split(","):
        modality = "text" if dataset in datasets.TEXT_SETS else "image"
        for system in (s for s in SYSTEMS[modality] if s in systems):
            job_s = args.budget if args.budget else budgets[dataset] * args.scale
            budget_s = job_s * BUDGET_SHARE.get(system, 1.0)
            print(f"{dataset} / {system}: budget {budget_s:.0f} s ...", flush=True)
            wait_for_quiet()
            env = environment()
            result = run_child(dataset, system, budget_s, args)
            env["load_average_after"] = list(os.getloadavg())
            row = {"dataset": dataset, "budget_s": budget_s, "job_budget_s": job_s, "system": system,
                   "seed": args.seed, **result, "quick": args.quick, "environment": env,
                   "protocol": protocol.stamp({}, run_record)}  # each merged row keeps its own run's record
            rows.append(row)
            print(table([row]).splitlines()[1], flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(merge(out, [row]), indent=1, default=str) + "\n")
    print(table(rows))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
