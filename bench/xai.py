"""Explainability at job budgets: suspect labels against known flips, explanations against their checks, calibration.

For each dataset (digits, MNIST, SMS Spam, MR; ``bench/peers/datasets.py``'s training parts) and each noise —
``clean``, ``uniform`` (5 % of the training labels moved to another class at random) and, for sets of more than
two classes, ``concentrated`` (5 % of the rows, all taken from the two classes whose mean inputs are closest and
moved to the other one of the pair) — ``synthesis.engine.synthesize`` runs as a job does (``Budget(seconds=...)``,
its own validation and test split). Per delivered variant its report gives: the seconds it took, the parts its time
left out, the suspect labels' recall and precision against the flipped rows among the rows it checked (and how many
it listed on the clean set), and each method's deletion and insertion areas against random order with its verdict.
Each variant's expected calibration error is measured on the set's test part through its ONNX export, and the dense
model's also with the temperature it shipped divided by taken out (``calibration``).

Two synthetic sets whose right answers are known (``tests/synthesis/explain_sets.py``) give the localisation
figures (the map's argmax on the object deciding the class; by chance 25 / 1,024) and the keyword figures (the
deciding keyword scores highest), each on a small network trained for it.

Default budget: 120 s per run (``--budget``). Run with XLA's CPU flags (``workers.app.use_cpu_xla_flags``). Writes
``bench/results/xai.json`` and prints a table.

Usage: ``python bench/xai.py [--datasets digits,mnist,sms,mr] [--budget 120] [--seed 0] [--data DIR] [--out FILE]
[--reports DIR]`` (``--reports``: write each variant's report files there).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import protocol
from peers import datasets

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "xai.json"
FLIPPED = 0.05
NOISES = ("clean", "uniform", "concentrated")


class Events:
    """A synthesis monitor that keeps the events and logs stages to stderr."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._start = time.monotonic()

    def stage(self, name: str) -> None:
        """Log a stage."""
        print(f"[{time.monotonic() - self._start:7.1f}s] stage {name}", file=sys.stderr, flush=True)

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        """Progress is not kept."""

    def event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Keep an event."""
        self.events.append((kind, dict(payload)))


def flip_labels(y: np.ndarray, classes: int, seed: int, noise: str = "uniform", x: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """`y` with FLIPPED of its labels changed, and the rows changed: 'uniform' to another class at random;
    'concentrated' between the two classes whose mean inputs `x` are closest (each row to the other class)."""
    rng = np.random.default_rng(seed)
    k = round(FLIPPED * len(y))
    if noise == "clean":
        return y.copy(), np.zeros(0, np.int64)
    noisy = y.copy()
    if noise == "uniform":
        rows = np.sort(rng.choice(len(y), k, replace=False))
        noisy[rows] = (y[rows] + rng.integers(1, classes, k)) % classes
        return noisy, rows
    assert x is not None
    means = np.stack([x[y == c].reshape(int((y == c).sum()), -1).mean(axis=0) for c in range(classes)])
    gaps = np.linalg.norm(means[:, None] - means[None], axis=2) + np.eye(classes) * np.inf
    a, b = np.unravel_index(np.argmin(gaps), gaps.shape)
    rows = np.sort(rng.choice(np.where((y == a) | (y == b))[0], k, replace=False))
    noisy[rows] = np.where(y[rows] == a, b, a)
    return noisy, rows


def run_dataset(name: str, noise: str, budget_s: float, seed: int, data_dir: Path, reports: Path | None = None
                ) -> dict[str, Any]:
    """Synthesize on the dataset's training part with `noise` in its labels; the figures of each variant's report."""
    from synthesis.budget import Budget
    from synthesis.engine import split_task, synthesize
    from synthesis.interface import Options, Task
    from workers.data import text_task

    split = datasets.load(name, seed, data_dir=data_dir)
    noisy, flipped = flip_labels(split.y_train, len(split.classes), seed, noise,
                                 None if split.modality == "text" else split.x_train)
    if split.modality == "text":
        task, encoder = text_task(list(split.x_train), noisy, len(split.classes), seed)
        x_test = np.asarray(encoder.encode(list(split.x_test)))
    else:
        x_test = split.x_test
        rows = split.x_train.reshape(len(split.x_train), -1)
        groups = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)
        task = Task("image", split.x_train, noisy, len(split.classes), groups=groups)
    task = Task(**{**task.__dict__, "classes": split.classes})
    monitor = Events()
    started = time.monotonic()
    result = synthesize(task, Budget(seconds=budget_s), Options(seed=seed), monitor)
    wall = time.monotonic() - started
    parts = split_task(task, seed, Options().test_fraction)[0]
    variants = [("dense", result.model)] + ([("compressed", result.compressed.model)] if result.compressed else [])
    row: dict[str, Any] = {"dataset": name, "noise": noise, "budget_s": budget_s, "wall_s": round(wall, 1),
                           "rows": len(noisy), "flipped": len(flipped),
                           "test_accuracy": result.model.metrics.get("test_accuracy"), "variants": {},
                           "calibration": test_calibration(variants, monitor.events, x_test, split.y_test)}
    for variant, model in variants:
        built = next((p for k, p in monitor.events if k == "report" and p.get("variant") == variant), {})
        if model.report is None:
            row["variants"][variant] = {"report": False, "reason": built.get("reason")}
            continue
        c = model.report.content
        if reports is not None:
            for file, data in model.report.files().items():
                (reports / f"{name}-{noise}" / variant).mkdir(parents=True, exist_ok=True)
                (reports / f"{name}-{noise}" / variant / file).write_bytes(data)
        row["variants"][variant] = {"report": True, "report_s": built.get("seconds"), "omitted": c["omitted"],
                                    "suspects": suspect_figures(c, parts, flipped),
                                    "methods": {m: {"seconds_per_input": s.get("seconds_per_input"),
                                                    **c["faithfulness"].get(m, {})} for m, s in c["methods"].items()}}
    return row


def suspect_figures(content: dict[str, Any], parts: Any, flipped: np.ndarray) -> dict[str, Any] | None:
    """The suspects' count, and their recall and precision against the flipped rows among the rows the report could
    check (the training rows, or training and validation rows where the floor's out-of-fold probabilities judged
    them): where it judged a sample of the training rows (``rows_checked`` below ``training_rows``), the flips it did
    not judge count as missed."""
    about = content.get("suspects")
    if about is None:
        return None
    checked = parts.train if about["rows_checked"] <= len(parts.train) else np.concatenate([parts.train, parts.val])
    flips = set(flipped.tolist()) & set(checked.tolist())
    listed = {s["row"] for s in content["suspect_labels"]}
    hits = len(listed & flips)
    return {"method": about["method"], "checked": about["rows_checked"], "listed": about["found"],
            "listed_share": round(about["found"] / max(about["rows_checked"], 1), 4), "flipped_checked": len(flips),
            "recall": round(hits / len(flips), 3) if flips else None,
            "precision": round(hits / len(listed), 3) if flips and listed else None}


def test_calibration(variants: list[tuple[str, Any]], events: list[tuple[str, dict[str, Any]]], x: np.ndarray,
                     y: np.ndarray) -> dict[str, Any]:
    """Each shipped variant's expected calibration error on the set's test part (through its ONNX export), and the
    dense model's before calibration: its probabilities with the temperature it shipped divided by taken out."""
    from domain.onnx_run import OnnxClassifier
    from synthesis.explain.summary import calibration

    fitted = [p["temperature"] for k, p in events if k in ("calibration", "ensemble") and "temperature" in p]
    out: dict[str, Any] = {"temperature": fitted[-1] if fitted else None}
    for variant, model in variants:
        proba = OnnxClassifier(model.onnx).predict_proba(x)
        out[f"{variant}_ece"] = round(calibration(proba, y)["ece"], 4)
        if variant == "dense" and fitted:
            logits = fitted[-1] * np.log(np.maximum(proba, 1e-30))
            before = np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))
            out["dense_ece_uncalibrated"] = round(calibration(before, y)["ece"], 4)
    return out


def synthetic_checks(seed: int) -> dict[str, Any]:
    """Localisation (object set) and keyword (keyword set) hit rates, as the tests measure them, with timings."""
    from domain.ingest.text import TextEncoder
    from synthesis.explain import METHODS, Subject
    from tests.synthesis.explain_sets import (
        bag_model,
        keyword_texts,
        object_cnn,
        object_images,
        on_keyword,
        on_object,
        trained,
    )

    x, y, boxes = object_images(3120, seed)
    spec = object_cnn()
    subject = Subject.of(spec, trained(spec, x[:3000], y[:3000], epochs=8))
    right = subject.probabilities(x[3000:]).argmax(axis=1) == y[3000:]
    xt, yt, bt = x[3000:][right], y[3000:][right], boxes[3000:][right]
    out: dict[str, Any] = {"localisation": {}, "keyword": {}}
    for name in ("gradcam", "integrated-gradients", "smoothgrad", "occlusion"):
        t0 = time.perf_counter()
        maps = METHODS[name].images(subject, xt, yt)
        seconds = (time.perf_counter() - t0) / len(xt)
        out["localisation"][name] = {"hit_rate": on_object(maps, bt), "images": len(xt),
                                     "seconds_per_input": round(seconds, 4)}
    texts, ty, where = keyword_texts(1100, seed)
    encoder = TextEncoder.fit(texts[:1000])
    rows = encoder.encode(texts)
    tspec = bag_model(encoder.layout(), rows.shape[1], 2)
    tsubject = Subject.of(tspec, trained(tspec, rows[:1000], ty[:1000], epochs=10, learning_rate=1e-2), encoder)
    keep = np.where(tsubject.probabilities(rows[1000:]).argmax(axis=1) == ty[1000:])[0] + 1000
    for name in ("integrated-gradients", "occlusion", "smoothgrad"):
        t0 = time.perf_counter()
        scores = METHODS[name].texts(tsubject, [texts[i] for i in keep], ty[keep])
        seconds = (time.perf_counter() - t0) / len(keep)
        out["keyword"][name] = {"hit_rate": on_keyword(scores, where[keep]), "texts": len(keep),
                                "seconds_per_input": round(seconds, 4)}
    return out


def table(rows: list[dict[str, Any]], synthetic: dict[str, Any]) -> str:
    """The figures as a plain-text table."""
    lines = ["dataset noise         variant     report s  listed (share)   recall  precision  test ECE (before)"]
    for row in rows:
        cal = row["calibration"]
        for variant, v in row["variants"].items():
            ece = f"{cal.get(f'{variant}_ece')}" + (f" ({cal['dense_ece_uncalibrated']})"
                                                    if variant == "dense" and "dense_ece_uncalibrated" in cal else "")
            if not v["report"]:
                lines.append(f"{row['dataset']:7} {row['noise']:13} {variant:11} no report: {v['reason']}  {ece}")
                continue
            s = v["suspects"] or {}
            lines.append(f"{row['dataset']:7} {row['noise']:13} {variant:11} {v['report_s']:8.1f}  "
                         f"{s.get('listed', '-'):>5} ({100 * s.get('listed_share', 0):5.2f} %)  "
                         f"{s.get('recall') if s.get('recall') is not None else '-':>6}  "
                         f"{s.get('precision') if s.get('precision') is not None else '-':>9}  {ece}")
    lines += ["", "dataset noise         variant     method                 deletion (random)  insertion (random)"
              "  better than random"]
    for row in rows:
        for variant, v in row["variants"].items():
            for m, f in v.get("methods", {}).items():
                if "deletion_auc" in f:
                    lines.append(f"{row['dataset']:7} {row['noise']:13} {variant:11} {m:22} "
                                 f"{f['deletion_auc']:.3f} ({f['random_deletion_auc']:.3f})     "
                                 f"{f['insertion_auc']:.3f} ({f['random_insertion_auc']:.3f})      "
                                 f"{f['better_than_random']}")
    lines.append("")
    for check, figures in synthetic.items():
        for m, f in figures.items():
            lines.append(f"{check:12} {m:22} hit rate {f['hit_rate']:.3f}  {f['seconds_per_input']:.4f} s/input")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="digits,mnist,sms,mr")
    p.add_argument("--noises", default=",".join(NOISES))
    p.add_argument("--budget", type=float, default=120.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", type=Path, default=datasets.SHARED_DATA)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--reports", type=Path, default=None, help="a folder to write each variant's report files into")
    protocol.add_busy(p)
    args = p.parse_args(argv)
    run_record = protocol.start(args.busy)  # refuses on a busy machine, before anything is measured
    from workers.app import use_cpu_xla_flags

    use_cpu_xla_flags()
    synthetic = synthetic_checks(args.seed)
    rows = [run_dataset(name, noise, args.budget, args.seed, args.data, args.reports)
            for name in args.datasets.split(",") for noise in args.noises.split(",")
            if noise != "concentrated" or name not in datasets.TEXT_SETS]  # the text sets have two classes
    print(table(rows, synthetic))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    protocol.write(args.out, {"when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                              "seed": args.seed, "budget_s": args.budget, "datasets": rows,
                              "synthetic": synthetic}, run_record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
