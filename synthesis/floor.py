"""The linear floor as a search trial (`synthesis.linear` fits it) and its refit on all rows for delivery."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from core.data import Dataset
from core.evaluation import evaluate
from core.model import build
from core.spec import Spec
from synthesis.linear import Bag, LinearFit, fit, refit
from synthesis.select import excess_loss
from synthesis.space import SpaceInfo
from synthesis.trial import TrialResult


def fit_trial(spec: Spec, info: SpaceInfo, data: Dataset, label_smoothing: float,
              time_limit_s: float | None) -> tuple[TrialResult, LinearFit | None]:
    """Fit the floor on `data`'s training rows (C chosen on its validation rows) and measure it as a trial: a
    one-point curve of its validation accuracy, its excess loss at `label_smoothing` (as every candidate's, so
    they compare: `synthesis.select`), its weights. A failure is a failed trial, never a failed job."""
    start = time.monotonic()
    deadline = None if time_limit_s is None else start + time_limit_s
    try:
        floor = fit(data.x_train, data.y_train, data.x_val, data.y_val, info.num_classes, bag_of(info), deadline)
        variables = floor.variables()
        measured = evaluate(build(spec), variables, data.x_val, data.y_val)
    except (ValueError, MemoryError) as exc:
        return TrialResult(status="failed", reason=f"linear floor: {exc}"[:500],
                           seconds=time.monotonic() - start), None
    seconds = time.monotonic() - start
    accuracy = float(measured["accuracy"]) if len(data.y_val) else 0.0
    loss = excess_loss(measured, label_smoothing, info.num_classes) if len(data.y_val) else None
    return TrialResult(curve=[accuracy], status="completed", reason=f"C={floor.c:g}", seconds=seconds, epochs=0,
                       variables=variables, best_metric=accuracy, best_loss=loss, first_epoch_s=seconds), floor


def refit_variables(floor: LinearFit, info: SpaceInfo, data: Dataset) -> dict[str, Any]:
    """The floor's weights refitted with its C on the training and validation rows together."""
    x = np.concatenate([data.x_train, data.x_val])
    y = np.concatenate([data.y_train, data.y_val])
    return refit(floor, x, y, info.num_classes).variables()


def bag_of(info: SpaceInfo) -> Bag:
    """Where `info`'s token rows keep their bag."""
    return Bag(info.bag_start, info.bag_vocab, info.bag_words)
