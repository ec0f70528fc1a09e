"""Compression inside real jobs: ``bench/compression.py --budget SECONDS`` runs the job path (``synthesis.engine``
with a time budget, as ``netsynth synthesize --budget`` and the workers run it) on each dataset and records what
its fine-synthesis stage delivered: the compressed artifact's ratio (dense float32 bytes of the delivered network
over the artifact's), the test accuracy of the dense and the compressed model (each through its ONNX export, on
the benchmark's held-out test part) and the seconds compression used of the job's budget.

Targets (issue 29): >= 8x at 120 s and >= 30x at 1,200 s on digits, SMS Spam and MNIST, within the tolerance
(0.5 points of validation accuracy). Results go to ``bench/results/compression_jobs.json`` (one row per dataset,
seed and budget; a re-run replaces its rows).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from peers import datasets
from synthesis_quality import LogMonitor, environment, job_task

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "compression_jobs.json"


def run_job(name: str, budget_s: float, seed: int, data_dir: Path) -> dict[str, Any]:
    """One job on ``name``'s training part within ``budget_s`` seconds; its dense and compressed models scored."""
    from domain.onnx_run import OnnxClassifier
    from synthesis.budget import Budget
    from synthesis.engine import synthesize
    from synthesis.interface import Options

    split = datasets.load(name, seed, data_dir=data_dir)
    task, x_test = job_task(split, seed)
    env, began = environment(), time.monotonic()
    result = synthesize(task, Budget(seconds=budget_s), Options(seed=seed, test_fraction=0.0), LogMonitor())
    wall = time.monotonic() - began
    y_test = np.asarray(split.y_test)
    dense = float(np.mean(OnnxClassifier(result.model.onnx).predict(x_test) == y_test))
    row: dict[str, Any] = {"dataset": name, "seed": seed, "budget_s": budget_s, "wall_s": round(wall, 1),
                           "test_rows": len(y_test), "params": result.model.param_count,
                           "accuracy_dense": dense,
                           "environment": {**env, "load_avg_end": os.getloadavg()[0]}}
    c = result.compressed
    if c is None:
        return {**row, "ratio": None, "accuracy_compressed": None, "accuracy_change_pt": None,
                "compress_s": None, "note": "no compressed variant (skipped or failed: see the job's log)"}
    compressed = float(np.mean(OnnxClassifier(c.model.onnx).predict(x_test) == y_test))
    figures = c.figures
    return {**row, "ratio": round(float(figures["ratio"]), 2), "accuracy_compressed": compressed,
            "accuracy_change_pt": round(100 * (compressed - dense), 2),
            "val_accuracy_before": figures["val_accuracy_before"], "val_accuracy_after": figures["val_accuracy_after"],
            "compress_s": figures["seconds"], "compress_share": round(figures["seconds"] / budget_s, 3),
            "epochs_used": figures["epochs_used"], "bits": figures["bits"], "kept_fraction": figures["kept_fraction"],
            "stop_reason": c.stop_reason, "compressed_bytes": figures["after"]["compressed_bytes"]}


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a text table."""
    lines = [f"{'dataset':<8}{'budget':>8}{'ratio':>9}{'dense acc':>11}{'compr. acc':>12}{'change':>9}"
             f"{'compress s':>12}{'share':>7}{'epochs':>8}"]
    for r in rows:
        if r["ratio"] is None:
            lines.append(f"{r['dataset']:<8}{r['budget_s']:>7.0f}s  {r['note']}")
            continue
        lines.append(f"{r['dataset']:<8}{r['budget_s']:>7.0f}s{r['ratio']:>8.1f}x{100 * r['accuracy_dense']:>10.2f}%"
                     f"{100 * r['accuracy_compressed']:>11.2f}%{r['accuracy_change_pt']:>+8.2f}p"
                     f"{r['compress_s']:>12.1f}{100 * r['compress_share']:>6.1f}%{r['epochs_used']:>8}")
    return "\n".join(lines)
