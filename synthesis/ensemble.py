"""The text model that ships: the best network, the linear floor refitted on all rows, or both averaged.

After final training, the winning network and the linear floor (`synthesis.linear`) are compared and combined on
the validation rows: the ensemble's logits are ``(w * floor + (1 - w) * network) / T``, ``w`` from :data:`WEIGHTS`
and the temperature ``T`` from :data:`TEMPERATURES` chosen by validation log-loss (a weighted average of the
members' log-probabilities, which is what summing logits amounts to after the softmax). Of the network, the floor
and that ensemble, the one `synthesis.select` ranks first ships: an ensemble only where validation says it is
better than either member. Each is compared by its log-loss at its own best temperature (temperature scaling: Guo
et al., "On Calibration of Modern Neural Networks", ICML 2017): a network trained against label-smoothed targets is
less sure of itself by design, and its plain log-loss would lose to the unsmoothed floor's whatever their errors
(on SMS Spam at split seed 0, an ensemble 0.5 points of validation accuracy below the network shipped by plain
log-loss, 0.053 against 0.086, and erred on 14 test texts where the network alone had erred on 8).
Averaging models whose errors differ — a linear model over sparse n-grams and a network over word sequences —
is the most reliable gain of AutoML systems (Erickson et al., "AutoGluon-Tabular", 2020, weighted ensembles;
Caruana et al., "Ensemble Selection from Libraries of Models", ICML 2004). The ensemble is one core network (the
members side by side, their output layers scaled by their weights, then summed), so it exports to one ONNX graph.

Whatever ships with the floor in it is delivered with the floor refitted with its chosen C on the training and
validation rows together: a tenth more rows to learn from. Every validation figure (the reported accuracy,
compression's tolerance) is measured before the refit, on rows the floor had not seen.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.analysis import analyse
from core.data import Dataset
from core.evaluation import predict_proba
from core.model import build
from synthesis import select, space
from synthesis.floor import refit_variables
from synthesis.linear import LinearFit
from synthesis.progress import Reporter
from synthesis.space.text import ensemble, member_prefix
from synthesis.trial import Trial, TrialResult

WEIGHTS = tuple(round(0.1 * i, 1) for i in range(1, 10))
"""The floor's weights tried in an ensemble (the network's is one minus it)."""
TEMPERATURES = tuple(float(t) for t in np.geomspace(0.25, 4.0, 33))
"""Temperatures tried: logits divided by 1/4 to 4, 2^(1/8) apart."""


def log_proba(trial: Trial, variables: dict[str, Any], info: space.SpaceInfo, x: np.ndarray) -> np.ndarray:
    """The network's log-probabilities [rows, classes] on `x`."""
    proba = predict_proba(build(space.to_spec(trial.candidate, info)), variables, x)
    return np.log(np.maximum(proba.astype(np.float64), 1e-12))


def scores(log_p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of log-probabilities, or of logits' weighted sums, on labels `y`."""
    log_p = log_p - np.logaddexp.reduce(log_p, axis=1, keepdims=True)
    return float(np.mean(log_p.argmax(axis=1) == y)), float(-np.mean(log_p[np.arange(len(y)), y]))


def calibrated(logits: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(accuracy, mean cross-entropy, temperature) of `logits` divided by the temperature of :data:`TEMPERATURES`
    that gives the lowest cross-entropy on labels `y` (the accuracy does not depend on it)."""
    losses = {t: scores(logits / t, y) for t in TEMPERATURES}
    best = min(losses, key=lambda t: losses[t][1])
    return (*losses[best], best)


def combined(parts: list[dict[str, Any]], weights: list[float], outputs: list[str]) -> dict[str, Any]:
    """One set of weights for the ensemble network of `parts` (each member's variables): every member's names
    prefixed (`synthesis.space.text.member_prefix`), its output layer (`outputs`) scaled by its weight."""
    merged: dict[str, dict[str, Any]] = {}
    for i, (variables, weight, output) in enumerate(zip(parts, weights, outputs, strict=True)):
        for collection, layers in variables.items():
            for name, layer in layers.items():
                scaled = {k: np.asarray(v) * weight for k, v in layer.items()} if name == output else layer
                merged.setdefault(collection, {})[member_prefix(i) + name] = scaled
    return merged


Weights = dict[str, Any]


def finish(trials: list[Trial], floor: tuple[Trial, LinearFit] | None, winner: Trial, variables: Weights,
           info: space.SpaceInfo, data: Dataset, reporter: Reporter) -> tuple[Trial, Weights, Weights]:
    """The trial to deliver, its weights as validated (what compression starts from and is judged against) and its
    weights as delivered: `winner`'s unless the floor or an ensemble of the two ranks first on the validation rows
    (an ensemble trial is appended to `trials`); wherever the floor ships, it is delivered refitted on all rows.
    Without a floor, `winner` as it is."""
    fitted_variables = floor[0].result.variables if floor is not None and floor[0].result is not None else None
    if floor is None or fitted_variables is None or not len(data.y_val):
        return winner, variables, variables
    floor_trial, fitted = floor
    if winner is floor_trial:
        return winner, variables, _refitted(fitted, info, data, reporter)
    y = data.y_val
    net = log_proba(winner, variables, info, data.x_val)
    lin = log_proba(floor_trial, fitted_variables, info, data.x_val)
    tried = {w: calibrated(w * lin + (1 - w) * net, y) for w in WEIGHTS}
    weight = min(tried, key=lambda w: tried[w][1])
    options = {"network": calibrated(net, y), "floor": calibrated(lin, y), "ensemble": tried[weight]}
    best = select.rank(list(options), lambda k: options[k][:2], len(y))[0]
    reporter.event("ensemble", {"network": winner.candidate.id, "floor": floor_trial.candidate.id, "weight": weight,
                                "chosen": best, **{f"{k}_val": {"accuracy": round(a, 6), "loss": round(loss, 6),
                                                                "temperature": round(t, 4)}
                                                   for k, (a, loss, t) in options.items()}})
    if best == "network":
        return winner, variables, variables
    if best == "floor":
        return floor_trial, fitted_variables, _refitted(fitted, info, data, reporter)
    accuracy, loss, temperature = options["ensemble"]
    scales = [weight / temperature, (1 - weight) / temperature]  # its probabilities as calibrated on validation
    members = [floor_trial.candidate, winner.candidate]
    candidate = space.Candidate(ensemble([m.arch for m in members], scales), winner.candidate.hparams,
                                f"ensemble:{floor_trial.candidate.id}+{winner.candidate.id}")
    spec = space.to_spec(candidate, info)
    outputs = [space.to_spec(m, info).output for m in members]
    validated = combined([fitted_variables, variables], scales, outputs)
    delivered = combined([_refitted(fitted, info, data, reporter), variables], scales, outputs)
    size = analyse(spec)
    trial = Trial(len(trials), candidate, params=size.params, macs=size.macs, status="completed",
                  curve=[accuracy], predicted=accuracy, latency_ms=floor_trial.latency_ms + winner.latency_ms,
                  result=TrialResult(curve=[accuracy], best_metric=accuracy, best_loss=loss, variables=validated))
    trials.append(trial)
    reporter.event("candidate", trial.to_dict())
    return trial, validated, delivered


def _refitted(fitted: LinearFit, info: space.SpaceInfo, data: Dataset, reporter: Reporter) -> Weights:
    variables = refit_variables(fitted, info, data)
    reporter.event("refit", {"model": "linear floor", "C": fitted.c, "rows": len(data.y_train) + len(data.y_val)})
    return variables
