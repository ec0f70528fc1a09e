"""Ablation of the search's early-stopping rank: the same searches at the same epoch budgets, once per rule.

For each dataset and seed, ``synthesis.engine.synthesize`` runs with an epoch budget (reproducible: the search log
is a function of the seed and the measured accuracies) once with each rule of ``synthesis.curves.RULES`` named
by ``--rules`` as the rank ASHA stops trials by (``SearchConfig.rung_rule``); everything else is equal. Reported
per run: the delivered model's error on the dataset's held-out test part (``bench/peers/datasets.py``), its
validation accuracy, the trials trained and how many were stopped at a rung, and the wall time. Compression and
explanations are off (their budget shares are left unspent) and latency is a fixed model, not calibrated, so the
runs differ in the rule only. The result goes under ``ablation`` in the result JSON (other keys are kept).

Usage: ``python bench/estimator_ablation.py --data DIR [--datasets digits,sms] [--epochs 60] [--seeds 0]
[--rules extrapolate,best_so_far] [--text-rows 2000] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import protocol

DEFAULT_OUT = Path(__file__).parent / "results" / "estimator.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="data folder (sms_spam/data.csv, mr/data.csv)")
    p.add_argument("--datasets", default="digits,sms")
    p.add_argument("--epochs", type=int, default=60, help="the synthesis budget in epochs")
    p.add_argument("--seeds", default="0")
    p.add_argument("--rules", default="extrapolate,best_so_far")
    p.add_argument("--text-rows", type=int, default=2_000, help="training rows of a text set used (0: all)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="result JSON; its other keys are kept")
    protocol.add_busy(p)
    return p.parse_args(argv)


def task_for(name: str, seed: int, data_dir: Path, text_rows: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """The synthesis task of dataset ``name``'s training part (a stratified subset of ``text_rows`` rows for a text
    set) and its test inputs and labels, encoded as a job encodes them."""
    from peers import datasets

    from synthesis.interface import Task
    from synthesis.split import stratified_sample
    from workers.data import text_task

    split = datasets.load(name, seed, data_dir=data_dir)
    if split.modality == "text":
        keep = stratified_sample(split.y_train, text_rows, seed) if text_rows else np.arange(len(split.y_train))
        task, encoder = text_task([str(t) for t in split.x_train[keep]], split.y_train[keep], len(split.classes),
                                  seed, test_fraction=0.0)
        return task, np.asarray(encoder.encode([str(t) for t in split.x_test]), np.int32), split.y_test
    rows = split.x_train.reshape(len(split.x_train), -1)
    groups = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)  # exact duplicates together
    return Task("image", split.x_train, split.y_train, len(split.classes), groups=groups), split.x_test, split.y_test


@contextmanager
def rung_rule(rule: str) -> Iterator[None]:
    """Within the block, the engine's searches rank trials at rungs by ``rule`` (``SearchConfig.rung_rule``)."""
    import synthesis.engine as engine
    from synthesis.search_config import SearchConfig

    names = vars(engine)  # the engine builds its SearchConfig by this name
    names["SearchConfig"] = partial(SearchConfig, rung_rule=rule)
    try:
        yield
    finally:
        names["SearchConfig"] = SearchConfig


def run_one(task: Any, x_test: np.ndarray, y_test: np.ndarray, epochs: int, seed: int, rule: str) -> dict[str, Any]:
    """Synthesize ``task`` within ``epochs`` epochs with ``rule`` as the stopping rank; score on the test part."""
    from domain.onnx_run import OnnxClassifier
    from synthesis.budget import Budget
    from synthesis.engine import synthesize
    from synthesis.interface import Options
    from synthesis.space import LatencyModel

    options = Options(seed=seed, test_fraction=0.0, compress=False, explain=False,
                      latency=LatencyModel(ms_per_mmac=0.01, overhead_ms=0.05))
    start = time.monotonic()
    with rung_rule(rule):
        result = synthesize(task, Budget(epochs=epochs), options)
    predicted = OnnxClassifier(result.model.onnx).predict(x_test)
    trained = [t for t in result.log if t.get("epochs")]
    return {"test_error": float(np.mean(predicted != y_test)), "val_accuracy": result.model.metrics.get("val_accuracy"),
            "trials": len(trained), "stopped_at_rung": sum(t["status"] == "stopped" for t in trained),
            "search_epochs": sum(int(t["epochs"]) for t in trained), "stop_reason": result.stop_reason,
            "spec": result.model.spec.get("name"), "wall_s": round(time.monotonic() - start, 1)}


RUN_KEY = ("dataset", "seed", "epochs", "rule", "train_rows")
"""What makes two ablation runs the same run: a re-run replaces it, other runs in the file are kept."""


def save(runs: list[dict[str, Any]], rules: list[str], args: argparse.Namespace) -> None:
    """Merge the runs so far into ``args.out`` under ``ablation``, replacing earlier runs with the same
    :data:`RUN_KEY` and keeping the others (after every run: a cut-short ablation keeps its finished runs)."""
    doc = json.loads(args.out.read_text()) if args.out.exists() else {}
    fresh = {tuple(r[k] for k in RUN_KEY) for r in runs}
    runs = [r for r in doc.get("ablation", {}).get("runs", []) if tuple(r[k] for k in RUN_KEY) not in fresh] + runs
    done = [r for r in rules if any(row["rule"] == r for row in runs)]
    mean = {rule: float(np.mean([r["test_error"] for r in runs if r["rule"] == rule])) for rule in done}
    settings = {**doc.get("ablation", {}).get("settings", {}),  # (a note written into the file is kept)
                "epochs": sorted({r["epochs"] for r in runs}), "text_rows": args.text_rows,
                "seeds": sorted({r["seed"] for r in runs}),
                "options": "test_fraction 0, compress and explain off, fixed latency model",
                "switch": "synthesis.search.SearchConfig.rung_rule"}
    doc["ablation"] = {"runs": runs, "mean_test_error": mean, "settings": settings}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Run every dataset, seed and rule, saving after each run; print the table."""
    args = parse_args(argv)
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    from core.kernels import CPU_XLA_FLAGS  # imports jax; flags are read at backend start

    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *CPU_XLA_FLAGS]).strip()
    rules, runs = args.rules.split(","), []
    for name in args.datasets.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            task, x_test, y_test = task_for(name, seed, args.data, args.text_rows)
            for rule in rules:
                row = {"dataset": name, "seed": seed, "epochs": args.epochs, "rule": rule,
                       "train_rows": len(task.y), "test_rows": len(y_test),
                       **run_one(task, x_test, y_test, args.epochs, seed, rule)}
                row["protocol"] = protocol.stamp({}, run_record)  # each merged run keeps its own run's record
                runs.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                save(runs, rules, args)
    print(f"{'dataset':<8}{'seed':>5}" + "".join(f"{r + ' test err':>24}" for r in rules))
    for name in dict.fromkeys(r["dataset"] for r in runs):
        for seed in dict.fromkeys(r["seed"] for r in runs if r["dataset"] == name):
            errs = {r["rule"]: r["test_error"] for r in runs if r["dataset"] == name and r["seed"] == seed}
            print(f"{name:<8}{seed:>5}" + "".join(f"{errs[r]:>24.4f}" for r in rules))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
