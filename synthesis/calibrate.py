"""Calibrated probabilities for every model that ships: one temperature, fitted on held-out predictions.

A network trained against label-smoothed targets is less sure of itself than it is right (its confidence is capped
near ``1 - s``), and one trained long on few rows more sure. Dividing its logits by the temperature ``T`` of the
lowest cross-entropy on held-out rows corrects both without changing a single prediction (temperature scaling:
Guo et al., "On Calibration of Modern Neural Networks", ICML 2017); `core.temperature` folds ``1 / T`` into the
logits layers, so the native model, ONNX and the predict endpoint all return the calibrated probabilities.

Held-out labels may be wrong: a set with 5 % of its labels flipped teaches a temperature that spreads those 5 %
over every prediction, and the model ships less sure than it is right on clean rows. So the temperature is fitted
together with a share ``e`` of wrong labels (forward noise correction: Patrini et al., "Making Deep Neural Networks
Robust to Label Noise", CVPR 2017): a held-out label is the true class with probability ``1 - e``, else another
class as often as the rows' predictions and labels disagree that way (`confusions`: flips spread at random or
concentrated between two classes alike). The temperature of the best joint fit ships, for the true classes; on
clean rows the fit takes ``e = 0`` unless confident mistakes are likelier than the temperature alone allows.

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


LABEL_NOISE = (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3)
"""Shares of wrong held-out labels the fit may assume."""


def confusions(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[K, K]``: for rows predicted class ``i``, how often each other class ``j`` is their label (one added to
    each pair, so that a pair never seen stays possible), each row summing to 1; the diagonal is 0."""
    classes = logits.shape[1]
    counts = np.ones((classes, classes)) - np.eye(classes)
    np.add.at(counts, (logits.argmax(axis=1), y), 1.0)
    np.fill_diagonal(counts, 0.0)
    return np.asarray(counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0))


def fit_temperature(logits: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(temperature, label noise, loss): the temperature of :data:`TEMPERATURES` and share of :data:`LABEL_NOISE`
    that together give the lowest mean cross-entropy of labels `y`, each wrong with that share as `confusions`
    spreads it; the loss is that cross-entropy (the plain one where the share is 0)."""
    at, swap = np.arange(len(y)), confusions(logits, y)
    noise = np.asarray(LABEL_NOISE)[:, None]
    best = (np.inf, 1.0, 0.0)
    for t in TEMPERATURES:
        z = logits / t
        p = np.exp(z - np.logaddexp.reduce(z, axis=1, keepdims=True))
        likelihood = (1 - noise) * p[at, y] + noise * (p @ swap)[at, y]
        losses = -np.mean(np.log(np.maximum(likelihood, 1e-30)), axis=1)
        k = int(np.argmin(losses))
        if losses[k] < best[0]:
            best = (float(losses[k]), t, LABEL_NOISE[k])
    return best[1], best[2], best[0]


def calibrated(logits: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(accuracy, loss, temperature) of `logits` on labels `y` at the temperature :func:`fit_temperature` fits (the
    accuracy does not depend on it; the loss allows for the wrong labels it fits)."""
    temperature, _, loss = fit_temperature(logits, y)
    return scores(logits, y)[0], loss, temperature


def calibrate(spec: Spec, variables: dict[str, Any], x: np.ndarray, y: np.ndarray, monitor: Monitor
              ) -> dict[str, Any]:
    """`variables` (weights of `spec` that did not train on rows `x`) with their logits divided by the temperature
    that fits their predictions of `x` to labels `y`; unchanged where there are no such rows."""
    if not len(y):
        return variables
    log_p = np.log(np.maximum(predict_proba(build(spec), variables, x), 1e-30))
    temperature, noise, _ = fit_temperature(log_p, y)
    monitor.event("calibration", {"temperature": round(temperature, 4), "label_noise": noise, "rows": len(y),
                                  "scored_on": "validation", "loss_before": round(scores(log_p, y)[1], 6),
                                  "loss_after": round(scores(log_p / temperature, y)[1], 6)})
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
