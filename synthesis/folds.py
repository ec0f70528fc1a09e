"""Text networks scored on folds of the labelled rows, and delivered as the average of the folds' networks.

Below :data:`FOLD_ROWS` labelled rows, the validation rows (a tenth of them) choose between the network, the linear
floor and their ensemble too noisily, and fit the ensemble's weight on few rows. So the network that won the final
training is trained again, from a fresh start, on each of the floor's k folds of the training and validation rows
(the recipe and schedule of the run whose weights won, kept at the epoch that run kept): every labelled row then
has a network's prediction from a network that did not train on it, beside the floor's out-of-fold one,
and `synthesis.ensemble` chooses and weighs on all of them (stacking on out-of-fold predictions: Wolpert, "Stacked
Generalization", 1992). Each fold's network trained on (k-1)/k of the rows; their average ships where it fits the
dense text model's parameters (bagging: Breiman, "Bagging Predictors", 1996), else the network refitted on all
rows (`synthesis.final.refit_network`) does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from core.analysis import analyse
from core.data import Dataset
from core.evaluation import predict_proba
from core.model import build
from core.train_config import TrainConfig
from synthesis import space
from synthesis.budget import Budget
from synthesis.floor import labelled
from synthesis.linear import folds, scores
from synthesis.progress import Monitor
from synthesis.search import Search
from synthesis.space.text import MODEL_PARAMS
from synthesis.trial import TrialResult, run_until

if TYPE_CHECKING:
    from synthesis.final import Final

FOLD_ROWS = 20_000
"""The most labelled rows whose networks are scored on folds; above it the validation rows are many enough. Not tuned
on a set: the issue's bound."""


def planned(search: Search, data: Dataset) -> bool:
    """Whether the final training of `search`'s text network is to be followed by the folds: a floor fitted on these
    rows (not on a sample) and at most FOLD_ROWS labelled rows."""
    rows = len(data.y_train) + len(data.y_val)
    return search.floor is not None and rows <= FOLD_ROWS and len(search.floor[1].held_out) == rows


@dataclass
class FoldNetworks:
    """A network's out-of-fold log-probabilities [labelled rows, classes] (training rows, then validation rows), each
    fold's weights, the seconds they took, and whether their average ships (set by `synthesis.ensemble`)."""

    held_out: np.ndarray
    variables: list[dict[str, Any]]
    seconds: float
    shipped: bool = False

    def fitting(self, info: space.SpaceInfo, network: space.Candidate, beside: int) -> int:
        """How many of the folds' networks fit in a dense text model beside `beside` parameters (the floor's, or
        none): 0 when fewer than two do (then one network refitted on all rows ships instead)."""
        params = analyse(space.to_spec(network, info)).params
        fit = min(len(self.variables), (MODEL_PARAMS - beside) // max(params, 1))
        return fit if fit >= 2 else 0


def train_folds(final: Final, search: Search, info: space.SpaceInfo, data: Dataset, budget: Budget,
                monitor: Monitor, seed: int) -> FoldNetworks | None:
    """`final`'s network trained afresh on each of the floor's folds of the labelled rows, with the recipe and
    schedule of its `recipe`, kept at the epoch it names; None (the validation rows decide) above FOLD_ROWS rows,
    without a floor fitted on these rows, when the folds do not fit the final training's time (or epochs) left, or
    when a fold's run does not reach that epoch."""
    repeated = recipe(final)
    if final.refit or repeated is None or not planned(search, data) or space.is_fitted(final.winner.candidate):
        return None
    run, schedule, epochs = repeated
    x, y = labelled(data)
    splits, end = folds(y, seed), budget.final_end()
    event: dict[str, Any] = {"candidate": final.winner.candidate.id, "folds": len(splits), "epochs": epochs,
                             "schedule_epochs": schedule.epochs, "rows": len(y)}
    time_limit = None if budget.reproducible else budget.left(end)
    row_epoch_s = run.seconds / max(run.epochs, 1) / max(len(data.x_train), 1)
    needs = run.compile_s + sum(epochs * row_epoch_s * len(train) for train, _ in splits)
    if (short := budget.shortfall(epochs * len(splits), needs, end)) is not None:
        monitor.event("folds", {**event, "status": "skipped", "reason": f"the folds: {short}"})
        return None
    spec = space.to_spec(final.winner.candidate, info)
    held_out, nets, start = np.zeros((len(y), info.num_classes)), [], time.perf_counter()
    for i, (train, test) in enumerate(splits):
        left = None if time_limit is None else budget.left(end)
        if left is not None and left <= 0:  # the folds before took the final training's time
            monitor.event("folds", {**event, "status": "deadline", "fold": i,
                                    "reason": "the final training's time ran out"})
            return None
        config = replace(schedule, seed=schedule.seed + 1 + i, keep_last=True, until_deadline=False,
                         time_limit_s=left)
        out, weights = run_until(spec, config, Dataset(x[train], y[train], x[test], y[test]), epochs, search.tick,
                                 on_epoch=lambda _curve: search.tick())
        budget.spend_epochs(out.epochs)
        if weights is None:
            monitor.event("folds", {**event, "status": out.status, "fold": i, "reason": out.reason or out.status})
            return None
        held_out[test] = probabilities_log(spec_proba(spec, weights, x[test]))
        nets.append(weights)
    accuracy, loss = scores(held_out, y)
    seconds = time.perf_counter() - start
    monitor.event("folds", {**event, "status": "completed", "seconds": round(seconds, 1),
                            "accuracy": round(accuracy, 6), "loss": round(loss, 6),
                            "fold_accuracy": [round(scores(held_out[t], y[t])[0], 6) for _, t in splits]})
    return FoldNetworks(held_out, nets, seconds)


def recipe(final: Final) -> tuple[TrialResult, TrainConfig, int] | None:
    """The run whose kept weights the folds' networks repeat from a fresh start, its recipe with the length of the
    schedule to repeat, and the epoch whose weights to keep; None when no network run kept weights. `final`'s
    validated final run where its weights were kept: the epochs its search trial kept and then its own, on one
    schedule as long as the two; else the search trial whose weights ship, on a schedule as long as it ran. A schedule
    cut to the kept epoch would end its learning rate there, and the networks would train less than the run they
    repeat."""
    trial = final.winner.result
    if final.validated is not None and final.schedule is not None:
        before = trial.best_epoch if final.start is not None and trial is not None else 0
        run, schedule = final.validated, final.schedule
        return run, replace(schedule, epochs=before + schedule.epochs), before + run.best_epoch
    if trial is None or trial.best_epoch < 1:
        return None
    schedule = final.winner.candidate.hparams.to_train_config(epochs=max(trial.epochs, trial.best_epoch), seed=10_000,
                                                              patience=None, time_limit_s=None)
    return trial, schedule, trial.best_epoch


def spec_proba(spec: Any, variables: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """The class probabilities [rows, classes] of the network `spec` with `variables` on `x`."""
    return np.asarray(predict_proba(build(spec), variables, x))


def probabilities_log(proba: np.ndarray) -> np.ndarray:
    """Log-probabilities, floored at 1e-12."""
    return np.log(np.maximum(proba.astype(np.float64), 1e-12))
