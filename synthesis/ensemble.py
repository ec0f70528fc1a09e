"""The text model that ships: the best network, the linear floor, or both averaged, chosen on held-out scores.

After final training, the winning network and the linear floor (`synthesis.linear`) are compared and combined on
out-of-fold log-probabilities: of every labelled row where the network was also trained on the floor's folds
(`synthesis.folds`), else of the validation rows (the floor's are out-of-fold there too, from its cross-validation).
The ensemble's logits are ``(w * floor + (1 - w) * network) / T``, ``w`` from :data:`WEIGHTS` and the temperature
``T`` from `synthesis.calibrate.TEMPERATURES` (a weighted average of the members' log-probabilities; temperature
scaling: Guo et al., "On Calibration of Modern Neural Networks", ICML 2017). Each option (network alone, floor
alone, ensemble) is scored by cross-fitting on those rows: its ``w`` and ``T`` are chosen by log-loss on k - 1 folds
and scored on the fold left out, so the rows that choose between the options never also fitted what they choose (the
ensemble's two free parameters would otherwise flatter it). The option that `synthesis.select` ranks first on those
scores ships, with ``w`` and ``T`` then fitted on all of the rows. A network trained against label-smoothed targets
is less sure of itself by design; its own temperature keeps that from deciding the comparison, and what ships,
network or floor alone too, ships divided by its temperature (calibrated out of fold). Averaging models whose errors
differ — a linear model over sparse n-grams and a network over word sequences — is the most reliable gain of AutoML
systems (Erickson et al., "AutoGluon-Tabular", 2020, weighted ensembles; Caruana et al., "Ensemble Selection from
Libraries of Models", ICML 2004). The ensemble is one core network (the members side by side, their output layers
scaled by their weights, then summed), so it exports to one ONNX graph.

Whatever ships is delivered fitted on all training and validation rows: the floor refitted with its form and C, the
network as the average of the folds' networks (each trained on all rows but one fold's) where they fit the dense
text model's parameters, else trained again for the epochs validation kept (`synthesis.final.refit_network`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from core.analysis import analyse
from core.data import Dataset
from core.temperature import scale_logits
from synthesis import select, space
from synthesis.calibrate import calibrated
from synthesis.floor import labelled, refit_variables, val_log_proba
from synthesis.folds import FoldNetworks, probabilities_log, spec_proba
from synthesis.linear import LinearFit, folds, scores
from synthesis.progress import Monitor
from synthesis.space.text import ensemble, floor_params, member_prefix
from synthesis.trial import Trial, TrialResult

WEIGHTS = tuple(round(0.1 * i, 1) for i in range(1, 10))
"""The floor's weights tried in an ensemble (the network's is one minus it)."""
OPTIONS = {"network": (0.0,), "floor": (1.0,), "ensemble": WEIGHTS}
"""The floor's weights each option may take."""


def log_proba(trial: Trial, variables: dict[str, Any], info: space.SpaceInfo, x: np.ndarray) -> np.ndarray:
    """The network's log-probabilities [rows, classes] on `x`."""
    return probabilities_log(spec_proba(space.to_spec(trial.candidate, info), variables, x))


def fit_weight(net: np.ndarray, lin: np.ndarray, y: np.ndarray, weights: tuple[float, ...]) -> tuple[float, float]:
    """The floor weight of `weights` and the temperature of the lowest cross-entropy of ``w * lin + (1 - w) * net``
    on labels `y`."""
    tried = {w: calibrated(w * lin + (1 - w) * net, y) for w in weights}
    weight = min(tried, key=lambda w: tried[w][1])
    return weight, tried[weight][2]


def out_of_fold(net: np.ndarray, lin: np.ndarray, y: np.ndarray, weights: tuple[float, ...], seed: int
                ) -> tuple[float, float]:
    """(accuracy, cross-entropy) of the option taking `weights`, each fold of the rows scored with the weight and
    temperature fitted on the other folds (:func:`fit_weight`)."""
    logits = np.zeros_like(net)
    for train, test in folds(y, seed):
        w, t = fit_weight(net[train], lin[train], y[train], weights)
        logits[test] = (w * lin[test] + (1 - w) * net[test]) / t
    return scores(logits, y)


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
           info: space.SpaceInfo, data: Dataset, monitor: Monitor, seed: int = 0,
           refit: Callable[[], Weights | None] | None = None, folded: FoldNetworks | None = None
           ) -> tuple[Trial, Weights, Weights]:
    """The trial to deliver, its weights as validated (what was chosen on held-out rows) and its weights as
    delivered: `winner`'s unless the floor or an ensemble of the two ranks first on out-of-fold scores (an ensemble
    trial is appended to `trials`). The scores are those of every labelled row when `folded` holds the network's
    fold runs (`synthesis.folds`), else of the validation rows. Whatever ships is delivered fitted on all rows: the
    floor refitted, and the network as the average of the folds' networks where they fit (`folded.shipped` is then
    set), else as `refit` trains it again (its validated weights where `refit` gives None). Without a floor, `winner`
    as `refit` delivers it."""
    def network() -> Weights:
        again = refit() if refit is not None else None
        return variables if again is None else again

    if floor is None or not compares(floor, data):
        return winner, variables, network()
    floor_trial, linear_fit = floor
    fitted_variables = floor_trial.result.variables if floor_trial.result is not None else None
    assert fitted_variables is not None
    floor_spec = space.to_spec(floor_trial.candidate, info)
    if winner is floor_trial:
        lin, y = _floor_held_out(linear_fit, data)
        return winner, variables, scale_logits(floor_spec, _refitted(linear_fit, info, data, monitor),
                                               1 / calibrated(lin, y)[2])
    if folded is not None:
        y, net, lin = labelled(data)[1], folded.held_out, linear_fit.held_out
    else:
        y, net, lin = data.y_val, log_proba(winner, variables, info, data.x_val), val_log_proba(linear_fit, data)
    held_out = {k: out_of_fold(net, lin, y, weights, seed) for k, weights in OPTIONS.items()}
    best = select.rank(list(held_out), lambda k: held_out[k], len(y))[0]
    weight, temperature = fit_weight(net, lin, y, OPTIONS[best])
    beside = floor_params(info) if best == "ensemble" else 0
    fold_nets = folded.fitting(info, winner.candidate, beside) if folded is not None and best != "floor" else 0
    monitor.event("ensemble", {"network": winner.candidate.id, "floor": floor_trial.candidate.id, "weight": weight,
                               "temperature": round(temperature, 4), "chosen": best,
                               "scored_on": "folds" if folded is not None else "validation", "rows": len(y),
                               "fold_networks": fold_nets,
                               **{f"{k}_val": {"accuracy": round(a, 6), "loss": round(loss, 6)}
                                   for k, (a, loss) in held_out.items()}})
    if best == "floor":
        return floor_trial, fitted_variables, scale_logits(floor_spec, _refitted(linear_fit, info, data, monitor),
                                                           1 / temperature)
    if best == "network" and not fold_nets:
        return winner, variables, scale_logits(space.to_spec(winner.candidate, info), network(), 1 / temperature)
    members, parts, scales = [], [], []
    if best == "ensemble":  # its probabilities as calibrated out of fold
        members, parts, scales = [floor_trial.candidate], [_refitted(linear_fit, info, data, monitor)], \
            [weight / temperature]
    nets = list(folded.variables[:fold_nets]) if folded is not None and fold_nets else [network()]
    members += [winner.candidate] * len(nets)
    parts += nets
    scales += [(1 - weight) / temperature / len(nets)] * len(nets)
    if fold_nets and folded is not None:
        folded.shipped = True
    accuracy, loss = held_out[best]
    label = f"{floor_trial.candidate.id}+" if best == "ensemble" else ""
    candidate = space.Candidate(ensemble([m.arch for m in members], scales), winner.candidate.hparams,
                                f"ensemble:{label}{winner.candidate.id}" + (f"*{len(nets)}" if fold_nets else ""))
    spec = space.to_spec(candidate, info)
    outputs = [space.to_spec(m, info).output for m in members]
    delivered = combined(parts, scales, outputs)
    validated = delivered if fold_nets else combined([fitted_variables, variables], scales, outputs)
    size = analyse(spec)
    trial = Trial(len(trials), candidate, params=size.params, macs=size.macs, status="completed",
                  curve=[accuracy], predicted=accuracy,
                  latency_ms=(floor_trial.latency_ms if best == "ensemble" else 0.0) + winner.latency_ms * len(nets),
                  result=TrialResult(curve=[accuracy], best_metric=accuracy, best_loss=loss, variables=validated))
    trials.append(trial)
    monitor.event("candidate", trial.to_dict())
    return trial, validated, delivered


def compares(floor: tuple[Trial, LinearFit], data: Dataset) -> bool:
    """Whether :func:`finish` compares (and calibrates) the network with `floor`: the floor was fitted and there are
    validation rows."""
    return floor[0].result is not None and floor[0].result.variables is not None and bool(len(data.y_val))


def _floor_held_out(linear_fit: LinearFit, data: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """The floor's out-of-fold log-probabilities and their labels: of every labelled row where it was fitted on
    all of them, else of the validation rows."""
    y = labelled(data)[1]
    if len(linear_fit.held_out) == len(y):
        return linear_fit.held_out, y
    return val_log_proba(linear_fit, data), data.y_val


def _refitted(linear_fit: LinearFit, info: space.SpaceInfo, data: Dataset, monitor: Monitor) -> Weights:
    variables = refit_variables(linear_fit, info, data)
    monitor.event("refit", {"model": "linear floor", "form": linear_fit.description,
                            "rows": len(data.y_train) + len(data.y_val)})
    return variables
