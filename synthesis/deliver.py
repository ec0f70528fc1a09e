"""Deliver a trained network: evaluate it, export it to ONNX and verify the export, measure its latency."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core import checkpoint, onnx_export, tree
from core.analysis import analyse, architecture
from core.evaluation import predict_proba
from core.graph import validate
from core.model import build
from core.spec import Spec
from domain.onnx_run import OnnxClassifier
from synthesis.explain import Report
from synthesis.explain.summary import calibration
from synthesis.linear import scores

PARITY_TOLERANCE = 1e-3
"""Largest difference in any class probability between the ONNX export and the trained network."""


@dataclass(frozen=True)
class Delivered:
    """A network ready to ship: spec document, safetensors weights, verified ONNX export and measured figures."""

    spec: dict[str, Any]
    weights: bytes
    onnx: bytes
    param_count: int
    metrics: dict[str, Any] = field(default_factory=dict)
    report: Report | None = None  # the explainability report, when one was built within the budget
    architecture: dict[str, Any] | None = None  # its layers with their output shapes (`core.analysis.architecture`)


def onnx_latency_ms(classifier: OnnxClassifier, example: np.ndarray, runs: int = 30) -> float:
    """Median milliseconds of one single-example inference with onnxruntime (after a warm-up run)."""
    one = example[:1]
    classifier.predict_proba(one)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        classifier.predict_proba(one)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1000)


def deliver(spec: Spec, variables: dict[str, Any], x_test: np.ndarray, y_test: np.ndarray,
            probe: np.ndarray) -> Delivered:
    """Evaluate on the test split (none: no test figures; with them the expected calibration error and the
    reliability diagram's bins), export to ONNX, check on `probe` inputs that the export
    agrees with the network, measure size and latency.

    Raises RuntimeError when the export disagrees with the trained network by more than PARITY_TOLERANCE.
    """
    model = build(spec)
    proba = predict_proba(model, variables, x_test) if len(y_test) else None  # one pass: every test figure
    test = dict(zip(("accuracy", "loss"), scores(np.log(np.maximum(proba, 1e-30)), y_test), strict=True)) \
        if proba is not None else {}
    reliability = calibration(proba, y_test) if proba is not None else None
    onnx = onnx_export.to_onnx_bytes(spec, variables)
    classifier = OnnxClassifier(onnx)
    probe = probe[:64]
    gap = float(np.max(np.abs(classifier.predict_proba(probe) - predict_proba(model, variables, probe))))
    if gap > PARITY_TOLERANCE:
        raise RuntimeError(f"the ONNX export disagrees with the trained network (max |dp| = {gap:.2e})")
    info = analyse(spec)
    weights = checkpoint.to_bytes(spec, variables)
    metrics = {"test_accuracy": test.get("accuracy"), "test_loss": test.get("loss"), "params": info.params,
               "macs": info.macs, "weights_bytes": len(weights), "onnx_bytes": len(onnx),
               "latency_ms": round(onnx_latency_ms(classifier, probe), 4), "onnx_max_abs_diff": gap,
               "test_ece": reliability and round(reliability["ece"], 6), "test_reliability": reliability and
               reliability["bins"]}
    return Delivered(spec=spec.to_dict(), weights=weights, onnx=onnx, param_count=info.params, metrics=metrics,
                     architecture=architecture(spec))


def measured_latency_ms(spec: Spec, example: np.ndarray) -> float:
    """Latency of one example through `spec`'s ONNX export with placeholder weights (latency does not depend on
    the values), so nothing is compiled or trained to measure it."""
    shapes = checkpoint.variable_shapes(validate(spec))
    variables = {kind: tree.unflatten({path: np.full(shape, 0.01, np.float32) for path, shape in paths.items()})
                 for kind, paths in shapes.items()}
    return onnx_latency_ms(OnnxClassifier(onnx_export.to_onnx_bytes(spec, variables)), example, runs=15)
