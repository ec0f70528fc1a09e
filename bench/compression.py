"""Fine-grained synthesis measured: how much smaller ``synthesis.compress.compress`` makes a trained network, at
what accuracy.

For each dataset (``bench/peers/datasets.py``: digits, MNIST, SMS Spam with their fixed train / test splits) the
search space's seed design — the hand-written CNN for images, the wide text CNN (a hashed n-gram table beside a
word CNN: what SMS Spam jobs mostly ship; the hashed n-gram network alone until 2026-12-01) for SMS Spam — is
trained on the training part
(VAL_FRACTION = 20 % of it held out for validation, duplicates kept on one side: with 10 % one digits validation
error was 0.74 points, more than the tolerance) for a fixed number of epochs, then compressed under a fixed epoch
budget with the default tolerance (0.5 points of validation accuracy).
Settings (``SETTINGS``; training / compression epochs): digits 40 / 240, SMS Spam 12 / 40, MNIST 12 / 60 on the
first 8,000 training images only (6,399 train + 1,601 validation; the full 60,000 would take hours on two cores:
the per-layer searches score every candidate setting on 2,048 probe images), 6 pruning rounds each.
Accuracy before and after is on the benchmark's held-out test part (the compressed model scored through its ONNX
export); the tolerance itself is enforced on the validation rows, reported alongside.

``ratio`` = dense float32 bytes of the original network's variables / bytes of the compressed artifact
(``core.artifact``: spec, bitmaps or gap-coded masks, codebooks, bit-packed indices, each stream zlib'd or
LZMA'd). Target: >= 30x at <= 0.5 points lost. With several ``--seeds`` (each a split, training and compression
seed) the table adds each dataset's mean: digits' 450 test images make one run's change a draw with a spread of
about half a point, wider than the target.

``--budget 120,300,1200`` runs the real job path at those budgets instead (:mod:`compression_jobs`).

Usage: ``python bench/compression.py --data DIR [--datasets digits,mnist,sms] [--seeds 0,1,2] [--quick]
[--out FILE] [--keep DIR] [--budget SECONDS,...]``
where DIR holds ``mnist/mnist.npz`` and ``sms_spam/data.csv`` (the repository's ``../shared/data``).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import protocol
from peers import datasets
from synthesis_quality import LogMonitor, environment

if TYPE_CHECKING:  # imported where used at run time: JAX must load after XLA_FLAGS is set
    from core.data import Dataset
    from core.spec import Spec
    from core.train_config import TrainConfig
    from synthesis.compress import Options

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "compression.json"
VAL_FRACTION = 0.2


@dataclass(frozen=True)
class Setting:
    """A dataset's run: the seed design, training epochs, compression epochs, training rows used (0 = all) and
    connection-pruning rounds (``synthesis.compress.Options.prune_rounds``)."""

    seed_design: str
    train_epochs: int
    compress_epochs: int
    rows: int = 0
    prune_rounds: int = 6


SETTINGS = {"digits": Setting("seed:hand-cnn", 40, 240),
            "mnist": Setting("seed:hand-cnn", 12, 60, 8_000),
            "sms": Setting("seed:wide-text-cnn", 12, 40)}
QUICK = {"digits": Setting("seed:hand-cnn", 10, 8), "mnist": Setting("seed:hand-cnn", 1, 2, 3_000),
         "sms": Setting("seed:wide-text-cnn", 3, 4)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="folder with mnist/mnist.npz and sms_spam/data.csv")
    p.add_argument("--datasets", default="digits,sms,mnist", help="comma-separated subset of digits,mnist,sms")
    p.add_argument("--seeds", default="0", help="comma-separated seeds; one row per dataset and seed")
    p.add_argument("--quick", action="store_true", help="smoke run: few epochs, output in the temp folder")
    p.add_argument("--out", type=Path, help="result file (default bench/results/compression.json, with --budget "
                                            "bench/results/compression_jobs.json)")
    p.add_argument("--budget", default="", metavar="SECONDS",
                   help="comma-separated job budgets: run the real job path at each (bench/compression_jobs.py) "
                        "instead of compressing the seed design for fixed epochs")
    p.add_argument("--control", type=int, default=0, metavar="N",
                   help="also retrain the uncompressed network N times as one pruning round retrains a pruned one")
    p.add_argument("--keep", type=Path, help="folder to write each compressed artifact to (DATASET-SEED.nscz)")
    protocol.add_busy(p)
    return p.parse_args(argv)


def run(name: str, setting: Setting, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Train the seed design on one dataset with ``seed``, compress it, measure both on the held-out test part."""
    from core.data import Dataset
    from core.evaluation import evaluate
    from core.model import build
    from core.training import train
    from domain.ingest import TextEncoder
    from domain.ingest.text import Layout
    from domain.onnx_run import OnnxClassifier
    from synthesis import space
    from synthesis.compress import Options, compress
    from synthesis.engine import space_info
    from synthesis.interface import Task
    from synthesis.split import stratified_split

    start = time.monotonic()
    split = datasets.load(name, seed, data_dir=args.data)
    x_train, y_train, x_test = split.x_train, split.y_train, split.x_test
    if setting.rows:
        x_train, y_train = x_train[:setting.rows], y_train[:setting.rows]
    y, text = y_train.astype(np.int32), split.modality == "text"
    groups = None if text else np.unique(x_train.reshape(len(x_train), -1), axis=0, return_inverse=True)[1].reshape(-1)
    parts = stratified_split(y, seed, val_fraction=VAL_FRACTION, test_fraction=0.0, groups=groups)
    if text:  # the vocabulary comes from the training rows only, as in a job
        encoder = TextEncoder.fit([x_train[i] for i in parts.train])
        x, x_test, vocab = encoder.encode(list(x_train)), encoder.encode(list(x_test)), encoder.layout()
    else:
        x, vocab = x_train.astype(np.float32), Layout(vocab_size=0, bag_start=0, bag_vocab=0, bag_words=0)
        x_test = x_test.astype(np.float32)
    data = Dataset(x[parts.train], y[parts.train], x[parts.val], y[parts.val])
    task = Task(split.modality, x, y, len(split.classes), groups=groups, **vocab)  # text: words, then the n-gram bag
    info = space_info(task, parts.train)
    candidate = next(c for c in space.seeds(info) if c.origin == setting.seed_design)
    spec = space.to_spec(candidate, info)
    config = candidate.hparams.to_train_config(epochs=setting.train_epochs, seed=seed, time_limit_s=None,
                                               patience=max(setting.train_epochs // 3, 4))
    print(f"{name}: training {setting.seed_design} for {setting.train_epochs} epochs on {len(parts.train)} rows",
          file=sys.stderr, flush=True)
    trained = train(build(spec), data, config)
    train_s = time.monotonic() - start
    y_test = split.y_test.astype(np.int32)
    before_test = evaluate(build(spec), trained.variables, x_test, y_test)["accuracy"]
    options = Options(prune_rounds=setting.prune_rounds)
    c = compress(spec, trained.variables, data, epochs=setting.compress_epochs, seed=seed, config=config,
                 monitor=LogMonitor(), options=options)
    after_test = float(np.mean(OnnxClassifier(c.onnx).predict(x_test) == y_test))
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        (args.keep / f"{name}-{seed}.nscz").write_bytes(c.artifact)
    before, after = c.figures["before"], c.figures["after"]
    return {"dataset": name, "seed": seed, "dense_bytes": before["dense_bytes"],
            "compressed_bytes": after["compressed_bytes"],
            "ratio": round(c.ratio, 2), "accuracy_before": before_test, "accuracy_after": after_test,
            "accuracy_change_pt": round(100 * (after_test - before_test), 2),
            "val_accuracy_before": c.figures["val_accuracy_before"],
            "val_accuracy_after": c.figures["val_accuracy_after"],
            "tolerance": c.figures["tolerance"], "design": setting.seed_design, "train_rows": len(parts.train),
            "val_rows": len(parts.val), "test_rows": len(y_test), "train_epochs": setting.train_epochs,
            "compress_epochs": setting.compress_epochs,
            "prune_rounds": setting.prune_rounds, "stop_reason": c.stop_reason,
            "before": before, "after": after, "bits": c.figures["bits"], "kept_fraction": c.figures["kept_fraction"],
            "bytes": breakdown(c.artifact), "train_s": round(train_s, 1),
            "compress_s": round(time.monotonic() - start - train_s, 1),
            **control(spec, trained.variables, data, config, options, setting.compress_epochs, args.control,
                      (x_test, y_test), before_test)}


def control(spec: Spec, variables: dict[str, Any], data: Dataset, config: TrainConfig, options: Options,
            compress_epochs: int, n: int, test: tuple[np.ndarray, np.ndarray], before: float) -> dict[str, Any]:
    """``{"control_accuracy": [...], "control_change_pt": mean}``: the test accuracy of the trained network (which
    scored ``before`` on ``test``) retrained ``n`` times uncompressed (new seeds), each as one pruning round of a
    ``compress_epochs`` budget retrains (its share of the epochs, ``lr_scale``, ``patience``): what retraining
    alone does to the test accuracy. Empty when ``n`` is 0."""
    from core.evaluation import evaluate
    from core.model import build
    from core.training import train
    from synthesis.budget import Budget
    from synthesis.compress.context import grant
    from synthesis.compress.retrain import retraining

    if n == 0:
        return {}
    epochs, _ = grant(Budget(epochs=compress_epochs), options.shares[1] / options.prune_rounds, options.max_epochs)
    model, accuracies = build(spec), []
    for k in range(n):
        again = retraining(config, options, epochs, None, config.seed + 1 + k)
        retrained = train(model, data, again, variables=variables)
        accuracies.append(float(evaluate(model, retrained.variables, *test)["accuracy"]))
    return {"control_accuracy": accuracies, "control_change_pt": round(100 * (float(np.mean(accuracies)) - before), 2)}


def breakdown(packed: bytes) -> dict[str, int]:
    """The artifact's bytes by kind: header (spec and leaf table), masks, plain float32 values (biases,
    normalisation, unshared kept weights), codebooks and indices (``docs/compressed-format.md``)."""
    head_len = struct.unpack("<I", packed[5:9])[0]
    out = {"header": 9 + head_len, "masks": 0, "values": 0, "codebooks": 0, "indices": 0}
    for mask, k, _, lengths in json.loads(zlib.decompress(packed[9:9 + head_len]))["leaves"]:
        lengths = list(lengths)
        for _ in range(2 if mask == 3 else 1 if mask else 0):  # the row code (3) has two mask streams
            out["masks"] += lengths.pop(0)
        if k:
            out["codebooks"] += lengths[0]
            out["indices"] += lengths[1]
        else:
            out["values"] += lengths[0]
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a text table, then each dataset's mean ratio and accuracy change where it has several seeds."""
    lines = [f"{'dataset':<8}{'seed':>5}{'dense B':>12}{'compr. B':>10}{'ratio':>8}{'acc before':>12}{'acc after':>11}"
             f"{'params':>20}{'nonzeros':>10}{'onnx.gz B':>11}{'latency ms':>16}"]
    for r in rows:
        b, a = r["before"], r["after"]
        lines.append(f"{r['dataset']:<8}{r['seed']:>5}{r['dense_bytes']:>12,}{r['compressed_bytes']:>10,}"
                     f"{r['ratio']:>7.1f}x{100 * r['accuracy_before']:>11.2f}%{100 * r['accuracy_after']:>10.2f}%"
                     f"{b['params']:>10,}>{a['params']:<9,}{a['nonzeros']:>10,}{a['onnx_gzip_bytes']:>11,}"
                     f"{b['latency_ms']:>8.3f}>{a['latency_ms']:<7.3f}")
        if "control_accuracy" in r:
            lines.append(f"{'':<13}retrained uncompressed {len(r['control_accuracy'])} times: test "
                         + " ".join(f"{100 * c:.2f}%" for c in r["control_accuracy"])
                         + f", mean change {r['control_change_pt']:+.2f} pt")
    for name, m in means(rows).items():
        lines.append(f"{name:<8}{'mean':>5} of {m['seeds']} seeds: ratio {m['ratio']:.1f}x, test accuracy change "
                     f"{m['accuracy_change_pt']:+.2f} pt (from {m['lowest_change_pt']:+.2f} to "
                     f"{m['highest_change_pt']:+.2f})" + (f"; retrained uncompressed {m['control_change_pt']:+.2f} pt"
                                                          if "control_change_pt" in m else ""))
    return "\n".join(lines)


def means(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per dataset with rows of more than one seed: the mean ratio and test accuracy change (points), and the
    lowest and highest change."""
    out = {}
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name]
        if len(mine) > 1:
            changes = [r["accuracy_change_pt"] for r in mine]
            out[name] = {"seeds": len(mine), "ratio": float(np.mean([r["ratio"] for r in mine])),
                         "accuracy_change_pt": round(float(np.mean(changes)), 2),
                         "lowest_change_pt": round(min(changes), 2), "highest_change_pt": round(max(changes), 2)}
            if all("control_change_pt" in r for r in mine):
                out[name]["control_change_pt"] = round(float(np.mean([r["control_change_pt"] for r in mine])), 2)
    return out


def main(argv: list[str] | None = None) -> None:
    """Run every selected dataset at every seed, print the table, merge the rows into the result file."""
    args = parse_args(argv)
    run_record = protocol.start(args.busy)
    from core.kernels import CPU_XLA_FLAGS  # imports jax; XLA reads its flags when the backend starts

    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *CPU_XLA_FLAGS]).strip()
    if args.budget:
        return jobs(args, run_record)
    settings = QUICK if args.quick else SETTINGS
    out = args.out or (Path(tempfile.gettempdir()) / "compression_quick.json" if args.quick else DEFAULT_OUT)
    rows = []
    for name in args.datasets.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            env = environment()
            row = {**run(name, settings[name], args, seed), "quick": args.quick, "environment": env}
            row["protocol"] = protocol.stamp({}, run_record)  # each merged row keeps its own run's record
            rows.append(row)
            print(table([row]).splitlines()[1], flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            old = json.loads(out.read_text()) if out.exists() else []
            out.write_text(json.dumps(merge_rows(old, row), indent=1, default=str) + "\n")
    print(table(rows))
    print(f"wrote {out}")


def jobs(args: argparse.Namespace, run_record: dict[str, Any]) -> None:
    """``--budget``: one job per dataset, seed and budget through the engine; print and merge the rows."""
    import compression_jobs

    out, rows = args.out or compression_jobs.DEFAULT_OUT, []
    for budget in (float(b) for b in args.budget.split(",")):
        for name in args.datasets.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                row = compression_jobs.run_job(name, budget, seed, args.data)
                row["protocol"] = protocol.stamp({}, run_record)  # each merged row keeps its own run's record
                rows.append(row)
                print(compression_jobs.table([row]).splitlines()[1], flush=True)
                out.parent.mkdir(parents=True, exist_ok=True)
                old = json.loads(out.read_text()) if out.exists() else []
                out.write_text(json.dumps(merge_rows(old, row, ("dataset", "seed", "budget_s")), indent=1,
                                          default=str) + "\n")
    print(compression_jobs.table(rows))
    print(f"wrote {out}")


def merge_rows(old: list[dict[str, Any]], row: dict[str, Any], keys: tuple[str, ...] = ("dataset", "seed")
               ) -> list[dict[str, Any]]:
    """``old`` without the row that matches ``row`` on ``keys`` (a missing seed is 0), then ``row``."""
    key = [row.get(k, 0 if k == "seed" else None) for k in keys]
    return [r for r in old if [r.get(k, 0 if k == "seed" else None) for k in keys] != key] + [row]


if __name__ == "__main__":
    main()
