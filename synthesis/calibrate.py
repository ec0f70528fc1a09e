"""Calibrated probabilities for every model that ships: one temperature, fitted on held-out predictions.

A network trained against label-smoothed targets is less sure of itself than it is right (its confidence is capped
near ``1 - s``), and one trained long on few rows more sure. Dividing its logits by the temperature ``T`` of the
lowest cross-entropy on held-out rows corrects both without changing a single prediction (temperature scaling:
Guo et al., "On Calibration of Modern Neural Networks", ICML 2017); `core.temperature` folds ``1 / T`` into the
logits layers, so the native model, ONNX and the predict endpoint all return the calibrated probabilities.

The held-out predictions are those nothing that shipped trained on: a text model's out-of-fold predictions where
`synthesis.ensemble` compares it with the floor (it calibrates those itself), else the shipped weights' own
predictions of validation rows they did not train on (after a refit, the rows it left out: `synthesis.final`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.evaluation import predict_proba
from core.model import build
from core.spec import Spec
from core.temperature import scale_logits
from synthesis.linear import scores
from synthesis.progress import Monitor

TEMPERATURES = tuple(float(t) for t in np.geomspace(1 / 16, 4.0, 49))
"""Temperatures tried: logits divided by 1/16 to 4, 2^(1/8) apart (a strongly regularised linear floor or a
network trained against smoothed targets needs its logits multiplied by several)."""


def calibrated(logits: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(accuracy, mean cross-entropy, temperature) of `logits` divided by the temperature of :data:`TEMPERATURES`
    that gives the lowest cross-entropy on labels `y` (the accuracy does not depend on it)."""
    losses = {t: scores(logits / t, y) for t in TEMPERATURES}
    best = min(losses, key=lambda t: losses[t][1])
    return (*losses[best], best)


def calibrate(spec: Spec, variables: dict[str, Any], x: np.ndarray, y: np.ndarray, monitor: Monitor
              ) -> dict[str, Any]:
    """`variables` (weights of `spec` that did not train on rows `x`) with their logits divided by the temperature
    that fits their predictions of `x` to labels `y`; unchanged where there are no such rows."""
    if not len(y):
        return variables
    log_p = np.log(np.maximum(predict_proba(build(spec), variables, x), 1e-30))
    _, loss, temperature = calibrated(log_p, y)
    monitor.event("calibration", {"temperature": round(temperature, 4), "rows": len(y), "scored_on": "validation",
                                  "loss_before": round(scores(log_p, y)[1], 6), "loss_after": round(loss, 6)})
    return scale_logits(spec, variables, 1.0 / temperature)


def matching_temperature(reference: np.ndarray, log_p: np.ndarray) -> float:
    """The temperature of :data:`TEMPERATURES` that brings log-probabilities `log_p` closest (cross-entropy) to the
    probabilities `reference` of the same rows."""
    def distance(t: float) -> float:
        z = log_p / t
        return float(-np.mean(np.sum(reference * (z - np.logaddexp.reduce(z, axis=1, keepdims=True)), axis=1)))
    return min(TEMPERATURES, key=distance)


def calibrated_like(spec: Spec, variables: dict[str, Any], reference: np.ndarray, x: np.ndarray, monitor: Monitor
                    ) -> dict[str, Any]:
    """`variables` with their logits divided by the temperature that brings their probabilities of rows `x` closest
    to the calibrated probabilities `reference` of another network of the same rows (a compressed network, which
    fine-tuning leaves more or less sure than the calibrated one it came from, takes back its confidence, with no
    held-out labels needed); unchanged without rows."""
    if not len(x):
        return variables
    temperature = matching_temperature(reference, np.log(np.maximum(predict_proba(build(spec), variables, x),
                                                                     1e-30)))
    monitor.event("compressed_calibration", {"temperature": round(temperature, 4), "rows": len(x)})
    return scale_logits(spec, variables, 1.0 / temperature)
