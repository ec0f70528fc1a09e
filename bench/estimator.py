"""How well early-stopping rules rank candidates after 20 % of their training, on curves recorded for the purpose.

For each dataset, random candidates of its search space (``synthesis.space.sample_admissible``: image candidates with
varied block types, depths, widths; text candidates with varied embeddings, encoders and poolings; each with its
learning rate, weight decay, batch size...) are trained to a full budget of E epochs with no early stopping, recording
every epoch's validation accuracy and elapsed time. Each rule of ``synthesis.curves.RULES`` (the curve-family
extrapolation, the best accuracy so far, the last one) then sees only the first ``round(fraction * E)`` epochs of each
curve; the figure of merit is Spearman's rank correlation (``scipy.stats.spearmanr``) between its scores and the final
accuracy (the best validation accuracy by epoch E, what training keeps), see ``bench/estimator_score.py``. The cost
spent is that prefix as a fraction of the full runs' epochs and wall time.

Datasets (``bench/estimator_data.py``): digits (any ``--seed``), an MNIST subset, and the text sets SMS Spam and MR
(``--data DIR``). The estimator was designed on the digits and MNIST curves of seed 0; every other set is marked
``fresh``. Candidates over ``--max-macs-*`` multiply-adds per image are shrunk or redrawn, and one whose full run
would last longer than ``--max-seconds`` (projected after its second epoch) is replaced and listed under ``skipped``.
``--rescore FILE`` re-evaluates the curves recorded in an earlier result with the current rules, without training;
``--merge FILE`` keeps an earlier result's datasets (and its ``ablation``) beside the ones trained now.

Usage: ``python bench/estimator.py --data DIR [--datasets digits,sms,mr] [--seed 1] [--candidates 30]
[--rescore FILE] [--merge FILE] [--quick] [--out FILE]``.
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
import protocol
from estimator_data import TEXT, load_digits, load_mnist, load_text
from estimator_score import rescore

DEFAULT_OUT = Path(__file__).parent / "results" / "estimator.json"
TUNED_ON = ("digits", "mnist")
"""The datasets (at seed 0) whose curves the extrapolation was designed on: every other curve is fresh to it."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--candidates", type=int, default=30, help="candidates per dataset")
    p.add_argument("--fraction", type=float, default=0.2, help="share of the epochs the rules see")
    p.add_argument("--epochs-digits", type=int, default=20)
    p.add_argument("--epochs-mnist", type=int, default=10)
    p.add_argument("--epochs-text", type=int, default=15)
    p.add_argument("--mnist-train", type=int, default=5_000)
    p.add_argument("--mnist-val", type=int, default=3_000)
    p.add_argument("--text-rows", type=int, default=2_500, help="rows of a text set's training part used (80/20)")
    p.add_argument("--max-macs-digits", type=int, default=5_000_000, help="forward MACs per image, at most")
    p.add_argument("--max-macs-mnist", type=int, default=2_000_000, help="forward MACs per image, at most")
    p.add_argument("--max-macs-text", type=int, default=5_000_000, help="forward MACs per text, at most")
    p.add_argument("--max-seconds", type=float, default=90.0,
                   help="replace a candidate whose full training would take longer (projected after 2 epochs)")
    p.add_argument("--datasets", default="digits,mnist", help="comma-separated subset of digits,mnist,sms,mr")
    p.add_argument("--data", type=Path, help="data folder: sms_spam/data.csv, mr/data.csv, mnist/mnist.npz")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rescore", type=Path, help="re-evaluate the curves recorded in an earlier result; no training")
    p.add_argument("--merge", type=Path, help="keep an earlier result's datasets and ablation beside the new ones")
    p.add_argument("--quick", action="store_true", help="smoke run: 4 candidates, small data, few epochs")
    p.add_argument("--out", type=Path, help=f"result JSON (default {DEFAULT_OUT}; with --quick a temporary file)")
    protocol.add_busy(p)
    args = p.parse_args(argv)
    if args.out is None:
        args.out = Path(tempfile.gettempdir()) / "estimator_quick.json" if args.quick else DEFAULT_OUT
    if args.quick:
        args.candidates, args.epochs_digits, args.epochs_mnist, args.epochs_text = 4, 5, 5, 5
        args.mnist_train, args.mnist_val, args.text_rows = 1_000, 500, 600
    return args


def key(name: str, seed: int) -> str:
    """A dataset's key in the result: its name, with the seed unless 0."""
    return name if seed == 0 else f"{name}_seed{seed}"


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


def run_dataset(name: str, data: Any, info: Any, epochs: int, max_macs: int, args: argparse.Namespace
                ) -> dict[str, Any]:
    """Train ``args.candidates`` candidates on one dataset and score the rules on their curves."""
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
        partial = {"epochs": epochs, "seed": args.seed, "fresh": not (name in TUNED_ON and args.seed == 0)}
        save({"datasets": {key(name, args.seed): {**partial, "candidates": rows}}},  # --rescore-able if cut short
             args.out.with_suffix(".partial.json"), quiet=True)
        print(f"  {name} {len(rows):>2}/{args.candidates} {row['id']} lr {row['hparams']['learning_rate']:.2g} "
              f"params {row['params']:>8,} macs {macs / 1e6:5.2f}M  final {max(row['curve']):.4f}  "
              f"{row['wall_s']:6.1f}s", flush=True)
    settings = {"epochs": epochs, "train_size": len(data.x_train), "val_size": len(data.x_val),
                "max_macs": max_macs, "max_seconds": args.max_seconds, "skipped": failures, "seed": args.seed,
                "fresh": not (name in TUNED_ON and args.seed == 0), "seconds": time.perf_counter() - start}
    return rescore({**settings, "candidates": rows}, args.fraction)


def load(name: str, args: argparse.Namespace) -> tuple[Any, Any, int, int]:
    """Dataset ``name``'s data, SpaceInfo, epochs and MAC limit under ``args``."""
    if name == "digits":
        return (*load_digits(args.seed), args.epochs_digits, args.max_macs_digits)
    if args.data is None:
        raise SystemExit(f"{name} needs --data DIR")
    if name == "mnist":
        data, info = load_mnist(args.data / "mnist" / "mnist.npz", args.mnist_train, args.mnist_val, args.seed)
        return data, info, args.epochs_mnist, args.max_macs_mnist
    if name in TEXT:
        return (*load_text(name, args.data, args.text_rows, args.seed), args.epochs_text, args.max_macs_text)
    raise SystemExit(f"unknown dataset {name!r}")


# ---------------------------------------------------------------------------------------------- the run


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run (or re-score) every requested dataset and return the result document."""
    import jax

    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    earlier = json.loads(args.merge.read_text()) if args.merge else {}
    per: dict[str, dict[str, Any]] = {k: rescore(r, args.fraction) for k, r in earlier.get("datasets", {}).items()}
    if args.rescore:
        recorded = json.loads(args.rescore.read_text())
        earlier = earlier or recorded
        per |= {k: rescore(r, args.fraction) for k, r in recorded["datasets"].items()}
        names = []
    for name in names:
        data, info, epochs, max_macs = load(name, args)
        per[key(name, args.seed)] = run_dataset(name, data, info, epochs, max_macs, args)
    result: dict[str, Any] = {"rho": {k: r["rho"] for k, r in per.items()},
                              "fresh": sorted(k for k, r in per.items() if r.get("fresh", k not in TUNED_ON))}
    fresh = [per[k]["rho"] for k in result["fresh"]]
    if fresh:
        result["rho_fresh_mean"] = {rule: float(np.mean([r[rule] for r in fresh])) for rule in fresh[0]}
    source = Path(args.rescore).name if args.rescore else None  # the file's name: no machine paths in results
    result |= {"datasets": per,
               "settings": {"fraction": args.fraction, "rescored_from": source,
                            "rules": "synthesis.curves.RULES at round(fraction * E) epochs seen; extrapolate is "
                                     "predict_final(curve[:seen], E, warmup_fraction)",
                            "extrapolate_epochs": "predict_final(curve[:seen], E): fitted against plain epochs",
                            "target": "best validation accuracy by the last epoch",
                            "backend": jax.default_backend(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
                            "python": platform.python_version(), "jax": jax.__version__}}
    if "ablation" in earlier:
        result["ablation"] = earlier["ablation"]
    return result


def report(result: dict[str, Any]) -> str:
    """Return the result as tables: each rule's rho per dataset at the fraction seen, and by fraction."""
    per = result["datasets"]
    rules = list(next(iter(per.values()))["rho"])
    lines = [f"{'dataset':<14}{'fresh':>6}{'E':>4}{'seen':>5}{'n':>4}" + "".join(f"{r:>20}" for r in rules)]
    for name, r in per.items():
        lines.append(f"{name:<14}{'yes' if r.get('fresh') else 'no':>6}{r['epochs']:>4}{r['epochs_seen']:>5}"
                     f"{len(r['candidates']):>4}" + "".join(f"{r['rho'][k]:>20.3f}" for k in rules))
    if "rho_fresh_mean" in result:
        lines.append(f"{'fresh mean':<33}" + "".join(f"{result['rho_fresh_mean'][k]:>20.3f}" for k in rules))
    for name, r in per.items():
        cells = [f"{f}: " + " / ".join(f"{v['rho'][k]:.3f}" for k in rules) for f, v in r["by_fraction"].items()]
        lines.append(f"{name} rho ({' / '.join(rules)}) by fraction seen: " + ", ".join(cells))
    for name, r in per.items():
        lines.append(f"{name} ASHA replayed (chosen final / epochs spent): " + ", ".join(
            f"{k} {v['chosen_final']:.4f} / {v['epochs_spent']}" for k, v in r["replay"].items()))
    return "\n".join(lines)


def save(result: dict[str, Any], out: Path, quiet: bool = False, run_record: dict[str, Any] | None = None) -> None:
    """Write the result document as JSON to ``out`` (creating its folder), stamped with the run's record
    (bench/protocol.py) where given: the partial file written after each candidate has none."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if run_record is not None:
        protocol.write(out, result, run_record)
        return
    out.write_text(json.dumps(result, indent=2) + "\n")
    if not quiet:
        print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    """Put core's CPU flags into XLA_FLAGS before JAX starts, train and evaluate, print the table, save."""
    args = parse_args(argv)
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    from core.kernels import CPU_XLA_FLAGS  # imports jax; flags are read at backend start

    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *CPU_XLA_FLAGS]).strip()
    result = run(args)
    print(report(result))
    save(result, args.out, run_record=run_record)


if __name__ == "__main__":
    main()
