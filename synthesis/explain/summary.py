"""A model's global figures on its test split: confusion matrix, per-class precision / recall / F1, calibration
and the most confident mistakes (scikit-learn's metrics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

CALIBRATION_BINS = 10
"""Equal-width confidence bins of the reliability diagram and the expected calibration error."""


def calibration(proba: np.ndarray, y: np.ndarray, bins: int = CALIBRATION_BINS) -> dict[str, Any]:
    """The reliability diagram (per confidence bin: count, mean confidence, accuracy) and the expected calibration
    error (Guo et al., "On Calibration of Modern Neural Networks", ICML 2017: the count-weighted mean gap)."""
    confidence, correct = proba.max(axis=1), proba.argmax(axis=1) == y
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1], right=True), 0, bins - 1)
    diagram, ece = [], 0.0
    for b in range(bins):
        inside = which == b
        count = int(inside.sum())
        conf = float(confidence[inside].mean()) if count else None
        acc = float(correct[inside].mean()) if count else None
        if count:
            ece += count / len(y) * abs(acc - conf)  # type: ignore[operator]
        diagram.append({"low": float(edges[b]), "high": float(edges[b + 1]), "count": count, "confidence": conf,
                        "accuracy": acc})
    return {"bins": diagram, "ece": float(ece)}


def global_figures(proba: np.ndarray, y: np.ndarray, classes: Sequence[str], rows: np.ndarray,
                   mistakes: int = 10) -> dict[str, Any]:
    """The test split's figures: accuracy, confusion matrix (rows: true class, columns: predicted), per-class
    precision / recall / F1 / support, calibration, and the `mistakes` most confident wrong predictions with their
    rows in the uploaded data."""
    predicted = proba.argmax(axis=1)
    labels = list(range(len(classes)))
    precision, recall, f1, support = precision_recall_fscore_support(y, predicted, labels=labels, zero_division=0)
    wrong = np.where(predicted != y)[0]
    worst = wrong[np.argsort(-proba[wrong, predicted[wrong]], kind="stable")][:mistakes]
    return {
        "test_rows": len(y), "accuracy": float(np.mean(predicted == y)) if len(y) else None,
        "confusion_matrix": confusion_matrix(y, predicted, labels=labels).tolist(),
        "per_class": [{"class": classes[c], "precision": float(precision[c]), "recall": float(recall[c]),
                       "f1": float(f1[c]), "support": int(support[c])} for c in labels],
        "calibration": calibration(proba, y),
        "confident_mistakes": [{"row": int(rows[i]), "given": classes[int(y[i])],
                                "predicted": classes[int(predicted[i])],
                                "probability": float(proba[i, predicted[i]])} for i in worst],
    }
