"""The linear floor as a search trial (`synthesis.linear` fits it) and its refit on all rows for delivery."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from core.data import Dataset
from synthesis.linear import Bag, LinearFit, fit, refit, scores
from synthesis.select import excess_loss
from synthesis.space import SpaceInfo
from synthesis.split import Split
from synthesis.trial import TrialResult


def fit_trial(info: SpaceInfo, data: Dataset, label_smoothing: float, time_limit_s: float | None,
              seed: int = 0) -> tuple[TrialResult, LinearFit | None]:
    """Fit the floor on `data`'s training and validation rows (form and C chosen by cross-validation on them) and
    measure it as a trial: a one-point curve of its out-of-fold accuracy, its out-of-fold excess loss at
    `label_smoothing` (as every candidate's, so they compare: `synthesis.select`), its weights. A failure is a
    failed trial, never a failed job."""
    start = time.monotonic()
    deadline = None if time_limit_s is None else start + time_limit_s
    x, y = labelled(data)
    try:
        floor = fit(x, y, info.num_classes, bag_of(info), seed, deadline)
    except (ValueError, MemoryError) as exc:
        return TrialResult(status="failed", reason=f"linear floor: {exc}"[:500],
                           seconds=time.monotonic() - start), None
    seconds = time.monotonic() - start
    accuracy, cross_entropy = scores(floor.held_out, y)
    measured = {"loss": cross_entropy, "uniform_loss": float(-np.mean(floor.held_out))}
    loss = excess_loss(measured, label_smoothing, info.num_classes)
    folds = ", ".join(f"{k}: {a:.4f}" for k, (a, _) in floor.tried.items())
    return TrialResult(curve=[accuracy], status="completed",
                       reason=f"{floor.description} (out-of-fold accuracy {folds})"[:500], seconds=seconds,
                       epochs=0, variables=floor.variables(), best_metric=accuracy, best_loss=loss,
                       first_epoch_s=seconds), floor


def val_log_proba(floor: LinearFit, data: Dataset) -> np.ndarray:
    """The floor's out-of-fold log-probabilities on `data`'s validation rows (the last rows it was fitted on)."""
    return floor.held_out[len(floor.held_out) - len(data.y_val):]


def refit_variables(floor: LinearFit, info: SpaceInfo, data: Dataset) -> dict[str, Any]:
    """The floor's weights with its form and C fitted on all of `data`'s training and validation rows (more of
    them than it was chosen on when the search trained on a sample)."""
    x, y = labelled(data)
    if len(y) == len(floor.held_out):
        return floor.variables()
    return refit(floor, x, y, info.num_classes).variables()


def out_of_fold(floor: LinearFit | None, split: Split) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows the floor was cross-validated on (indices of the task's training then validation rows) and their
    out-of-fold class probabilities; None without a floor, or when it was fitted on a sample of the rows."""
    rows = np.concatenate([split.train, split.val])
    if floor is None or len(floor.held_out) != len(rows):
        return None
    return rows, np.exp(floor.held_out)


def labelled(data: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """The training and validation rows together (the job's own test rows are not in `data`)."""
    return np.concatenate([data.x_train, data.x_val]), np.concatenate([data.y_train, data.y_val])


def bag_of(info: SpaceInfo) -> Bag:
    """Where `info`'s token rows keep their bag."""
    return Bag(info.bag_start, info.bag_vocab, info.bag_words)
