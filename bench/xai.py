"""Explainability at job budgets: what the report costs and whether its explanations pass checks that can fail.

For each dataset (digits, SMS Spam, MNIST; ``bench/peers/datasets.py``'s training parts) 3 % of the training labels
are flipped at random (seeded), and ``synthesis.engine.synthesize`` runs as a job does (``Budget(seconds=...)``, its
own validation and test split). Per delivered variant its report gives: the seconds it took and their fraction of
the budget, the parts its time left out, each method's seconds per input, deletion faithfulness (area under the
deletion curve in attribution order against random order, lower is more faithful) and the integrated gradients'
completeness error; ``suspect_labels`` gives the mislabel recall (flipped rows among the top 2k, k flipped). Each
variant's expected calibration error is measured on the set's test part through its ONNX export, and the dense
model's also with the temperature it shipped divided by taken out (``calibration``).

Two synthetic sets whose right answers are known (``tests/synthesis/explain_sets.py``) give the localisation
figures (the map's argmax on the object deciding the class; by chance 25 / 1,024) and the keyword figures (the
deciding keyword scores highest), each on a small network trained for it.

Default budgets: digits 120 s, SMS Spam 300 s, MNIST 600 s (``--scale`` multiplies them). Run with XLA's CPU flags
(``workers.app.use_cpu_xla_flags``). Writes ``bench/results/xai.json`` and prints a table.

Usage: ``python bench/xai.py [--datasets digits,sms,mnist] [--scale 1] [--seed 0] [--data DIR] [--out FILE]
[--reports DIR]`` (``--reports``: write each variant's report files there).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from peers import datasets

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "xai.json"
BUDGETS = {"digits": 120.0, "sms": 300.0, "mnist": 600.0}
FLIPPED = 0.03


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


def flip_labels(y: np.ndarray, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`y` with FLIPPED of its labels changed to another class at random, and the rows changed."""
    rng = np.random.default_rng(seed)
    k = round(FLIPPED * len(y))
    rows = np.sort(rng.choice(len(y), k, replace=False))
    noisy = y.copy()
    noisy[rows] = (y[rows] + rng.integers(1, classes, k)) % classes
    return noisy, rows


def run_dataset(name: str, budget_s: float, seed: int, data_dir: Path, reports: Path | None = None) -> dict[str, Any]:
    """Synthesize on the dataset's training part with flipped labels; the figures of each variant's report."""
    from synthesis.budget import Budget
    from synthesis.engine import synthesize
    from synthesis.interface import Options, Task
    from workers.data import text_task

    split = datasets.load(name, seed, data_dir=data_dir)
    noisy, flipped = flip_labels(split.y_train, len(split.classes), seed)
    if split.modality == "text":
        task, encoder = text_task(list(split.x_train), noisy, len(split.classes), seed)
        x_test = np.asarray(encoder.encode(list(split.x_test)))
    else:
        x_test = split.x_test
        rows = split.x_train.reshape(len(split.x_train), -1)
        groups = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)
        task = Task("image", split.x_train, noisy, len(split.classes), groups=groups)
    monitor = Events()
    started = time.monotonic()
    result = synthesize(Task(**{**task.__dict__, "classes": split.classes}), Budget(seconds=budget_s),
                        Options(seed=seed), monitor)
    wall = time.monotonic() - started
    variants = [("dense", result.model)] + ([("compressed", result.compressed.model)] if result.compressed else [])
    row: dict[str, Any] = {"dataset": name, "budget_s": budget_s, "wall_s": round(wall, 1),
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
                (reports / name / variant).mkdir(parents=True, exist_ok=True)
                (reports / name / variant / file).write_bytes(data)
        top = {s["row"] for s in c["suspect_labels"][: 2 * len(flipped)]}
        recall = len(top & set(flipped.tolist())) / len(flipped) if len(flipped) else None
        row["variants"][variant] = {
            "report": True, "report_s": built.get("seconds"),
            "fraction_of_budget": round(built["seconds"] / budget_s, 4),
            "omitted": c["omitted"], "suspect_checkpoints": c.get("suspect_checkpoints"),
            "mislabel_recall_top2k": recall,
            "methods": {m: {"seconds_per_input": s.get("seconds_per_input"),
                            **({"completeness_error_max": s["completeness_error_max"], "steps": s["steps"]}
                               if "completeness_error_max" in s else {}),
                            **c["faithfulness"].get(m, {})} for m, s in c["methods"].items()}}
    return row


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
    lines = ["dataset   variant     report s  % budget  mislabel recall  method                 s/input  "
             "deletion AUC (random)"]
    for row in rows:
        for variant, v in row["variants"].items():
            if not v["report"]:
                lines.append(f"{row['dataset']:9} {variant:11} no report: {v['reason']}")
                continue
            head = (f"{row['dataset']:9} {variant:11} {v['report_s']:8.1f}  {100 * v['fraction_of_budget']:7.2f}  "
                    f"{v['mislabel_recall_top2k']:15.2f}")
            methods = v["methods"] or {"(omitted)": {}}
            for i, (m, s) in enumerate(methods.items()):
                auc = (f"{s['deletion_auc']:.3f} ({s['random_deletion_auc']:.3f})" if "deletion_auc" in s else "")
                lead = head if i == 0 else " " * len(head)
                lines.append(f"{lead}  {m:22} {s.get('seconds_per_input', 0):7.4f}  {auc}")
    lines.append("")
    for row in rows:
        lines.append(f"{row['dataset']:9} test ECE {json.dumps(row['calibration'])}")
    lines.append("")
    for check, figures in synthetic.items():
        for m, f in figures.items():
            lines.append(f"{check:12} {m:22} hit rate {f['hit_rate']:.3f}  {f['seconds_per_input']:.4f} s/input")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="digits,sms,mnist")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", type=Path, default=datasets.SHARED_DATA)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--reports", type=Path, default=None, help="a folder to write each variant's report files into")
    args = p.parse_args(argv)
    from workers.app import use_cpu_xla_flags

    use_cpu_xla_flags()
    before = list(os.getloadavg())
    synthetic = synthetic_checks(args.seed)
    rows = [run_dataset(name, BUDGETS[name] * args.scale, args.seed, args.data, args.reports)
            for name in args.datasets.split(",")]
    print(table(rows, synthetic))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                                    "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                                    "seed": args.seed, "datasets": rows, "synthetic": synthetic,
                                    "load_average_before": before, "load_average_after": list(os.getloadavg())},
                                   indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
