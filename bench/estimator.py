"""How well learning-curve extrapolation ranks candidates after 20 % of their training, on digits and MNIST.

For each dataset, random candidates from the image search space (``synthesis.space.sample``: varied block
types, depths, widths, learning rates, weight decay, augmentation, batch sizes) are each trained to a full
budget of E epochs with no early stopping, recording every epoch's validation accuracy and elapsed time.
:func:`synthesis.estimator.predict_final` then sees only the first ``round(fraction * E)`` epochs of each
curve and predicts the final accuracy (the best validation accuracy by epoch E, what training keeps), told
the warm-up fraction of the schedule the run follows (``spearman_epochs_*``: the same fitted against plain
epochs). The figure of merit is Spearman's rank correlation between predicted and true final accuracy; the
baselines are the last observed accuracy and the best one so far. The cost spent is that prefix as a
fraction of the full runs' epochs and of their wall time (with and without the one-off compilation of each
candidate's first epoch).

Settings: digits (scikit-learn, 1797 8x8 images) split 80/20 stratified, E = 20 epochs; MNIST a fixed random
subset of the training set (5 000 images to train, 3 000 to validate), E = 10 epochs. Candidates whose
forward pass exceeds ``--max-macs-*`` multiply-adds per image are shrunk or redrawn
(``synthesis.space.sample_admissible``, as the search applies a compute constraint), so that 30 MNIST runs fit
in about half an hour on two cores; a candidate whose full run would last longer than ``--max-seconds``
(projected after its second epoch) is replaced too, and listed under ``skipped``. ``--rescore FILE``
re-evaluates the curves recorded in an earlier result with the current estimator, without training.

Usage: ``python bench/estimator.py [--quick] [--candidates 30] [--rescore FILE] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_OUT = Path(__file__).parent / "results" / "estimator.json"
DEFAULT_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist" / "mnist.npz"
EXTRA_FRACTIONS = (0.1, 0.2, 0.3, 0.5)
"""Prefix fractions also reported (from the same curves) to show how ranking quality grows with cost."""
RUN_SETTINGS = ("epochs", "train_size", "val_size", "max_macs", "max_seconds", "skipped", "seconds")
"""Per-dataset settings and counts a result keeps when its curves are re-scored."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--candidates", type=int, default=30, help="candidates per dataset")
    p.add_argument("--fraction", type=float, default=0.2, help="share of the epochs the estimator sees")
    p.add_argument("--epochs-digits", type=int, default=20)
    p.add_argument("--epochs-mnist", type=int, default=10)
    p.add_argument("--mnist-train", type=int, default=5_000)
    p.add_argument("--mnist-val", type=int, default=3_000)
    p.add_argument("--max-macs-digits", type=int, default=5_000_000, help="forward MACs per image, at most")
    p.add_argument("--max-macs-mnist", type=int, default=2_000_000, help="forward MACs per image, at most")
    p.add_argument("--max-seconds", type=float, default=90.0,
                   help="replace a candidate whose full training would take longer (projected after 2 epochs)")
    p.add_argument("--datasets", default="digits,mnist", help="comma-separated subset of digits,mnist")
    p.add_argument("--mnist", type=Path, default=DEFAULT_MNIST, help="mnist.npz (x_train, y_train, ...)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rescore", type=Path, help="re-evaluate the curves recorded in an earlier result; no training")
    p.add_argument("--quick", action="store_true", help="smoke run: 4 candidates, small data, few epochs")
    p.add_argument("--out", type=Path, help=f"result JSON (default {DEFAULT_OUT}; with --quick a temporary file)")
    args = p.parse_args(argv)
    if args.out is None:
        args.out = Path(tempfile.gettempdir()) / "estimator_quick.json" if args.quick else DEFAULT_OUT
    if args.quick:
        args.candidates, args.epochs_digits, args.epochs_mnist = 4, 5, 5
        args.mnist_train, args.mnist_val = 1_000, 500
    return args


# ---------------------------------------------------------------------------------------------- data


def load_digits(seed: int) -> tuple[Any, Any]:
    """Digits as a core Dataset (80/20 stratified split, raw 0-255 float pixels) and its SpaceInfo."""
    from sklearn.datasets import load_digits as sklearn_digits

    from core.data import Dataset
    from synthesis.space import SpaceInfo
    from synthesis.split import stratified_split

    digits = sklearn_digits()
    x = np.round(digits.images * 255 / 16).astype(np.float32)[..., np.newaxis]
    y = digits.target.astype(np.int32)
    split = stratified_split(y, seed, val_fraction=0.2, test_fraction=0.0)
    data = Dataset(x[split.train], y[split.train], x[split.val], y[split.val])
    return data, SpaceInfo("image", (8, 8, 1), 10, scale=1 / 255)


def load_mnist(path: Path, n_train: int, n_val: int, seed: int) -> tuple[Any, Any]:
    """A fixed random subset of MNIST's training set (n_train to train, n_val to validate) and its SpaceInfo."""
    from core.data import Dataset
    from synthesis.space import SpaceInfo

    with np.load(path) as f:
        x_all, y_all = f["x_train"], f["y_train"]
    rows = np.random.default_rng(seed).permutation(len(x_all))[: n_train + n_val]
    x, y = x_all[rows].astype(np.float32).reshape(-1, 28, 28, 1), y_all[rows].astype(np.int32)
    data = Dataset(x[:n_train], y[:n_train], x[n_train:], y[n_train:])
    return data, SpaceInfo("image", (28, 28, 1), 10, scale=1 / 255)


# ----------------------------------------------------------------------------------------- candidates


def draw(rng: np.random.Generator, info: Any, max_macs: int) -> tuple[Any, Any, int]:
    """Draw a random candidate within ``max_macs`` (as the search does); return it, its spec and its MACs."""
    from core.analysis import analyse
    from synthesis.space import Constraints, sample_admissible, to_spec

    candidate = sample_admissible(rng, info, Constraints(max_macs=max_macs))
    spec = to_spec(candidate, info)
    return candidate, spec, analyse(spec).macs


class TooSlow(Exception):
    """A candidate whose full training would take longer than the benchmark allows one candidate."""


def train_full(candidate: Any, spec: Any, data: Any, epochs: int, seed: int, max_seconds: float
               ) -> dict[str, Any]:
    """Train one candidate for ``epochs`` epochs without early stopping; return its curve and timings.

    Raises TooSlow after the second epoch when the run would last more than ``max_seconds``.
    """
    from core.analysis import analyse
    from core.model import build
    from core.train_config import Progress
    from core.training import train

    ends: list[float] = []  # elapsed seconds at the end of each epoch

    def guard(p: Progress) -> None:
        ends.append(p.elapsed_s)
        if len(ends) == 2 and epochs > 2:
            projected = ends[1] + (epochs - 2) * (ends[1] - ends[0])
            if projected > max_seconds:
                raise TooSlow(f"projected {projected:.0f} s > {max_seconds:.0f} s")

    config = candidate.hparams.to_train_config(epochs=epochs, seed=seed, time_limit_s=None, patience=None)
    start = time.perf_counter()
    result = train(build(spec), data, config, on_progress=guard)
    wall = time.perf_counter() - start
    curve = [float(h["val_accuracy"]) for h in result.history]
    elapsed = [float(h["elapsed_s"]) for h in result.history]
    epoch_s = float(np.median(np.diff(elapsed))) if len(elapsed) > 1 else elapsed[0]
    return {"id": candidate.id, "arch": candidate.arch, "hparams": candidate.to_dict()["hparams"],
            "params": analyse(spec).params, "curve": curve, "elapsed_s": elapsed, "wall_s": wall,
            "compile_s": max(elapsed[0] - epoch_s, 0.0), "warmup_fraction": config.warmup_fraction}


def evaluate(rows: list[dict[str, Any]], epochs: int, fraction: float) -> dict[str, Any]:
    """Spearman of the estimator and of the last-value baseline, and the cost, when ``fraction`` of the epochs
    is seen."""
    from core.train_config import TrainConfig
    from synthesis.estimator import predict_final, spearman

    seen = max(1, round(fraction * epochs))
    truth = [max(r["curve"]) for r in rows]
    warmup = [r.get("warmup_fraction", TrainConfig.warmup_fraction) for r in rows]
    predicted = [predict_final(r["curve"][:seen], epochs, w) for r, w in zip(rows, warmup, strict=True)]
    in_epochs = [predict_final(r["curve"][:seen], epochs) for r in rows]
    last = [r["curve"][seen - 1] for r in rows]
    best = [max(r["curve"][:seen]) for r in rows]
    prefix = sum(r["elapsed_s"][seen - 1] for r in rows)
    full = sum(r["elapsed_s"][-1] for r in rows)
    compile_s = sum(r["compile_s"] for r in rows)
    top = [i for i in range(len(rows)) if truth[i] >= float(np.median(truth))]  # the harder half to order

    def top_rho(values: list[float]) -> float:
        return spearman([values[i] for i in top], [truth[i] for i in top])

    return {"epochs_seen": seen, "spearman": spearman(predicted, truth), "spearman_epochs": spearman(in_epochs, truth),
            "spearman_last_value": spearman(last, truth),
            "spearman_best_so_far": spearman(best, truth),
            "spearman_top_half": top_rho(predicted), "spearman_top_half_last_value": top_rho(last),
            "cost_fraction_epochs": seen / epochs, "cost_fraction_wall": prefix / full,
            "cost_fraction_wall_after_compile": (prefix - compile_s) / (full - compile_s),
            "mean_abs_error": float(np.mean(np.abs(np.subtract(predicted, truth)))),
            "mean_abs_error_epochs": float(np.mean(np.abs(np.subtract(in_epochs, truth)))),
            "mean_abs_error_last_value": float(np.mean(np.abs(np.subtract(last, truth)))),
            "predicted": predicted, "last_value": last, "truth": truth}


def run_dataset(name: str, data: Any, info: Any, epochs: int, max_macs: int, args: argparse.Namespace
                ) -> dict[str, Any]:
    """Train ``args.candidates`` candidates on one dataset and evaluate the estimator on their curves."""
    rng = np.random.default_rng([args.seed, len(name)])
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    start = time.perf_counter()
    while len(rows) < args.candidates:
        candidate, spec, macs = draw(rng, info, max_macs)
        try:
            row = train_full(candidate, spec, data, epochs, args.seed, args.max_seconds)
        except Exception as exc:  # a failed or too slow candidate is replaced and reported
            failures.append({"id": candidate.id, "error": f"{type(exc).__name__}: {exc}", "macs": macs})
            print(f"  {name} {candidate.id} skipped: {failures[-1]['error']}", flush=True)
            continue
        rows.append({**row, "macs": macs})
        print(f"  {name} {len(rows):>2}/{args.candidates} {row['id']} lr {row['hparams']['learning_rate']:.2g} "
              f"params {row['params']:>8,} macs {macs / 1e6:5.2f}M  final {max(row['curve']):.4f}  "
              f"{row['wall_s']:6.1f}s", flush=True)
    settings = {"epochs": epochs, "train_size": len(data.x_train), "val_size": len(data.x_val),
                "max_macs": max_macs, "max_seconds": args.max_seconds, "skipped": failures,
                "seconds": time.perf_counter() - start}
    return rescore({**settings, "candidates": rows}, args.fraction)


def rescore(run: dict[str, Any], fraction: float) -> dict[str, Any]:
    """Evaluate the estimator on one dataset's recorded curves (``run["candidates"]``, trained for
    ``run["epochs"]`` epochs): figures at ``fraction`` and at EXTRA_FRACTIONS, predictions in each row."""
    rows, epochs = run["candidates"], run["epochs"]
    result = evaluate(rows, epochs, fraction)
    for row, pred, last in zip(rows, result.pop("predicted"), result.pop("last_value"), strict=True):
        row |= {"predicted": pred, "last_value": last, "final": max(row["curve"])}
    result.pop("truth")
    finals = [r["final"] for r in rows]
    by_fraction = {}
    for f in EXTRA_FRACTIONS:
        e = evaluate(rows, epochs, f)
        by_fraction[str(f)] = {k: v for k, v in e.items() if k not in ("predicted", "last_value", "truth")}
    kept = {k: v for k, v in run.items() if k in RUN_SETTINGS}
    return {**result, **kept, "final_accuracy_range": [min(finals), max(finals)],
            "final_accuracy_std": float(np.std(finals)), "by_fraction": by_fraction, "candidates": rows}


# ---------------------------------------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run every requested dataset and return the result document."""
    import jax

    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    per: dict[str, dict[str, Any]] = {}
    if args.rescore:
        earlier = json.loads(args.rescore.read_text())
        per = {name: rescore(r, args.fraction) for name, r in earlier["datasets"].items() if name in names}
        names = []
    for name in names:
        if name == "digits":
            data, info = load_digits(args.seed)
            per[name] = run_dataset(name, data, info, args.epochs_digits, args.max_macs_digits, args)
        elif name == "mnist":
            data, info = load_mnist(args.mnist, args.mnist_train, args.mnist_val, args.seed)
            per[name] = run_dataset(name, data, info, args.epochs_mnist, args.max_macs_mnist, args)
        else:
            raise SystemExit(f"unknown dataset {name!r}")
    result: dict[str, Any] = {}
    for name, r in per.items():
        result |= {f"spearman_{name}": r["spearman"], f"spearman_epochs_{name}": r["spearman_epochs"],
                   f"spearman_last_value_{name}": r["spearman_last_value"],
                   f"spearman_best_so_far_{name}": r["spearman_best_so_far"]}
    walls = [(sum(c["elapsed_s"][r["epochs_seen"] - 1] for c in r["candidates"]),
              sum(c["elapsed_s"][-1] for c in r["candidates"])) for r in per.values()]
    result |= {"cost_fraction": max(r["cost_fraction_epochs"] for r in per.values()),
               "cost_fraction_wall": sum(p for p, _ in walls) / sum(f for _, f in walls),
               "cost_fraction_wall_after_compile": max(r["cost_fraction_wall_after_compile"] for r in per.values()),
               "datasets": per,
               "settings": {"fraction": args.fraction, "candidates": args.candidates, "seed": args.seed,
                            "quick": args.quick, "rescored_from": str(args.rescore) if args.rescore else None,
                            "estimator": "synthesis.estimator.predict_final(curve[:seen], E, warmup_fraction)",
                            "estimator_epochs": "the same without warmup_fraction (fitted against epochs)",
                            "target": "best validation accuracy by the last epoch",
                            "backend": jax.default_backend(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
                            "python": platform.python_version(), "jax": jax.__version__}}
    return result


def report(result: dict[str, Any]) -> str:
    """Return the result as a table."""
    lines = [f"{'dataset':<8}{'E':>4}{'seen':>6}{'rho':>7}{'rho ep':>8}{'rho last':>10}{'rho best':>10}{'MAE':>8}"
             f"{'MAE ep':>8}{'MAE last':>10}"
             f"{'wall frac':>11}{'w/o compile':>13}{'final range':>16}"]
    for name, r in result["datasets"].items():
        lo, hi = r["final_accuracy_range"]
        lines.append(f"{name:<8}{r['epochs']:>4}{r['epochs_seen']:>6}{r['spearman']:>7.3f}{r['spearman_epochs']:>8.3f}"
                     f"{r['spearman_last_value']:>10.3f}{r['spearman_best_so_far']:>10.3f}{r['mean_abs_error']:>8.4f}"
                     f"{r['mean_abs_error_epochs']:>8.4f}"
                     f"{r['mean_abs_error_last_value']:>10.4f}{r['cost_fraction_wall']:>11.3f}"
                     f"{r['cost_fraction_wall_after_compile']:>13.3f}{f'{lo:.3f}-{hi:.3f}':>16}")
    for name, r in result["datasets"].items():
        lines.append(f"{name} top half by final accuracy: rho {r['spearman_top_half']:.3f}, "
                     f"last value {r['spearman_top_half_last_value']:.3f}")
    for name, r in result["datasets"].items():
        cells = [f"{f}: {v['spearman']:.3f} / {v['spearman_epochs']:.3f} / {v['spearman_last_value']:.3f} / "
                 f"{v['spearman_best_so_far']:.3f}" for f, v in r["by_fraction"].items()]
        lines.append(f"{name} rho (estimator / in epochs / last value / best so far) by fraction seen: "
                     + ", ".join(cells))
    lines.append(f"cost_fraction (epochs) {result['cost_fraction']:.3f}; wall {result['cost_fraction_wall']:.3f}, "
                 f"after compilation {result['cost_fraction_wall_after_compile']:.3f}")
    return "\n".join(lines)


def save(result: dict[str, Any], out: Path) -> None:
    """Write the result document as JSON to ``out`` (creating its folder)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    """Put core's CPU flags into XLA_FLAGS before JAX starts, train and evaluate, print the table, save."""
    args = parse_args(argv)
    from core.kernels import CPU_XLA_FLAGS  # imports jax; flags are read at backend start

    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *CPU_XLA_FLAGS]).strip()
    result = run(args)
    print(report(result))
    save(result, args.out)


if __name__ == "__main__":
    main()
