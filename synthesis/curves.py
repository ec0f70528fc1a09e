"""Learning-curve extrapolation: a candidate's final validation accuracy predicted from its first epochs.

The prediction is the median of three saturating curve families fitted to the validation accuracies
observed so far (epochs t = 1..n):

* ``pow3``: acc(t) = a - b * t^(-c), the power law that fits neural-network learning curves best in
  Domhan, Springenberg & Hutter, "Speeding up automatic hyperparameter optimization of deep neural
  networks by extrapolation of learning curves" (IJCAI 2015);
* ``exp3``: acc(t) = a - b * exp(-c * t), from the same family ensemble;
* ``pow2``: error(t) = b * t^(-c), a power law of the error with no floor (a straight line in log-log
  space).

For a fixed exponent the first two are linear in (a, b), so each is fitted exactly by least squares
over a grid of exponents (variable projection) under the constraints 0 <= a <= 1 and b >= 0: no
iterative optimiser, no failure modes, well under a millisecond per curve. Curves of fewer than
MIN_POINTS epochs predict their best value so far: two noisy points cannot tell a trend from noise,
and Baker, Gupta, Raskar & Naik, "Accelerating Neural Architecture Search using Performance
Prediction" (ICLR workshop 2018, arXiv 2017) find the last observed value a strong predictor early in
training. Every prediction is clipped to [best so far, 1]. ``bench/estimator.py`` measures how well the
predictions rank real candidates (see bench/README.md).

The search does not stop trials by this extrapolation: :data:`RULES` names the ranks it can use and
:data:`DEFAULT_RULE` is the best accuracy so far, which ranks final accuracies at least as well on curves the
extrapolation was not designed on (``bench/estimator.py``), as Baker et al. (2017) found of the observed value and as
Li et al.'s ASHA (MLSys 2020) ranks at each rung.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

POW_EXPONENTS = np.geomspace(0.05, 4.0, 64)
"""Exponents c tried for ``pow3``."""
EXP_RATES = np.geomspace(0.01, 3.0, 64)
"""Rates c (per epoch) tried for ``exp3``."""
MAX_ERROR_EXPONENT = 2.0
"""Steepest error decay ``pow2`` may extrapolate: error ~ t^-2."""
MIN_POINTS = 3
"""Fewest observed epochs the curve families are fitted to; shorter curves predict their best value."""
MIN_ERROR = 1e-6
"""Error floor before taking logarithms."""

Curve = Sequence[float] | np.ndarray
"""Per-epoch validation accuracies (a list or a 1-D array)."""
Basis = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (exponents [G], epochs [n]) -> [G, n]
Family = Callable[[np.ndarray, np.ndarray, float], float]  # (epochs, accuracies, horizon) -> prediction


def _saturating(basis: Basis, exponents: np.ndarray) -> Family:
    """The family acc(t) = a - b * basis(c, t), fitted for every c in ``exponents``; the best fit predicts."""

    def predict(t: np.ndarray, y: np.ndarray, horizon: float) -> float:
        phi = basis(exponents, t)
        phi_mean, y_mean = phi.mean(axis=1), y.mean()
        dphi = phi - phi_mean[:, None]
        var = np.einsum("gn,gn->g", dphi, dphi)
        b = np.maximum(-(dphi @ (y - y_mean)) / np.maximum(var, 1e-300), 0.0)
        a = y_mean + b * phi_mean
        capped = a > 1.0  # the asymptote may not exceed 1: refit b with a = 1
        b_capped = np.maximum(phi @ (1.0 - y), 0.0) / np.maximum(np.einsum("gn,gn->g", phi, phi), 1e-300)
        b = np.where(capped, b_capped, b)
        a = np.clip(a, 0.0, 1.0)
        sse = np.sum((a[:, None] - b[:, None] * phi - y) ** 2, axis=1)
        g = int(np.argmin(sse))
        return float(a[g] - b[g] * basis(exponents[g : g + 1], np.array([horizon]))[0, 0])

    return predict


def _pow2(t: np.ndarray, y: np.ndarray, horizon: float) -> float:
    """error(t) = b * t^(-c) fitted in log-log space, with 0 <= c <= MAX_ERROR_EXPONENT."""
    log_t, log_e = np.log(t), np.log(np.maximum(1.0 - y, MIN_ERROR))
    dt = log_t - log_t.mean()
    c = min(max(-float(dt @ (log_e - log_e.mean())) / float(dt @ dt), 0.0), MAX_ERROR_EXPONENT)
    return float(1.0 - np.exp(log_e.mean() + c * (log_t.mean() - np.log(horizon))))


FAMILIES: dict[str, Family] = {
    "pow3": _saturating(lambda c, t: np.power(t[None, :], -c[:, None]), POW_EXPONENTS),
    "exp3": _saturating(lambda c, t: np.exp(-np.outer(c, t)), EXP_RATES),
    "pow2": _pow2,
}
"""The curve families, by name: each maps (epochs, accuracies, horizon) to a predicted accuracy."""


def predict_final(curve: Curve, horizon: int, warmup_fraction: float | None = None) -> float:
    """Predict the best validation accuracy reached by epoch ``horizon`` from the per-epoch accuracies in
    ``curve`` (epochs 1..len(curve)).

    With ``warmup_fraction`` the run is taken to follow core's learning-rate schedule over ``horizon``
    epochs (linear warm-up for that fraction, then cosine decay to zero) and the curves are fitted against
    the learning rate spent so far instead of epochs: a decaying rate slows late progress, which plain
    epochs would over-extrapolate. The result lies in [max(curve), 1] when ``horizon >= len(curve)``; for
    a shorter horizon it is the best value observed by then. Raises ValueError for an empty curve, a
    non-finite value, ``horizon < 1`` or a warm-up fraction outside [0, 1).
    """
    y = np.asarray(curve, dtype=np.float64)
    if y.ndim != 1 or len(y) == 0 or not np.all(np.isfinite(y)):
        raise ValueError("curve must be a non-empty sequence of finite accuracies")
    y = np.clip(y, 0.0, 1.0)
    if horizon < 1:
        raise ValueError("horizon must be at least one epoch")
    if warmup_fraction is not None and not 0 <= warmup_fraction < 1:
        raise ValueError("warmup_fraction must be in [0, 1)")
    best = float(y[:horizon].max())
    if horizon <= len(y) or len(y) < MIN_POINTS:
        return best
    t = np.arange(1.0, len(y) + 1.0)
    end = float(horizon)
    if warmup_fraction is not None:
        t, end = schedule_time(t, horizon, warmup_fraction), float(schedule_time(np.array([end]), horizon,
                                                                                 warmup_fraction)[0])
    predictions = [family(t, y, end) for family in FAMILIES.values()]
    prediction = float(np.median([p for p in predictions if np.isfinite(p)] or [best]))
    return min(max(prediction, best), 1.0)


def schedule_time(epochs: np.ndarray, horizon: int, warmup_fraction: float) -> np.ndarray:
    """Learning rate spent by the end of each of ``epochs`` (in epochs at the peak rate) under a linear
    warm-up for ``warmup_fraction`` of ``horizon`` epochs followed by cosine decay to zero."""
    x = np.clip(epochs / horizon, 0.0, 1.0)
    w = warmup_fraction
    v = (x - w) / (1.0 - w)
    decay = w / 2 + (1.0 - w) * (v / 2 + np.sin(np.pi * v) / (2 * np.pi))
    warm = x * x / (2 * w) if w > 0 else np.zeros_like(x)
    return np.asarray(horizon * np.where(x < w, warm, decay), dtype=np.float64)


def rank_candidates(curves: Sequence[Curve], horizon: int, warmup_fraction: float | None = None) -> list[int]:
    """Indices of ``curves`` from the best predicted final accuracy to the worst (ties: best observed
    value first, then input order); ``warmup_fraction`` as for :func:`predict_final`."""
    keys = [(-predict_final(c, horizon, warmup_fraction), -float(np.max(c)), i) for i, c in enumerate(curves)]
    return [i for *_, i in sorted(keys)]


def best_so_far(curve: Curve, horizon: int = 0, warmup_fraction: float | None = None) -> float:
    """The best accuracy in ``curve`` (``horizon`` and ``warmup_fraction`` are ignored: the signature is a rule's)."""
    return float(np.max(np.asarray(curve, dtype=np.float64)))


def last_value(curve: Curve, horizon: int = 0, warmup_fraction: float | None = None) -> float:
    """The last accuracy in ``curve`` (Baker et al. 2017's baseline; the other arguments are ignored)."""
    return float(np.asarray(curve, dtype=np.float64)[-1])


Rule = Callable[[Curve, int, float | None], float]
"""An early-stopping rank: (accuracies so far, horizon in epochs, warm-up fraction or None) -> score, higher better."""
RULES: dict[str, Rule] = {"extrapolate": predict_final, "best_so_far": best_so_far, "last_value": last_value}
"""The ranks a search can stop trials by, by name."""
DEFAULT_RULE = "best_so_far"
"""The rule the search uses unless told otherwise: extrapolation did not rank better on fresh curves (see the module
docstring and bench/results/estimator.json)."""


def rung_score(curve: Curve, horizon: int, rule: str = DEFAULT_RULE, warmup_fraction: float | None = None) -> float:
    """The score ``rule`` (a name in :data:`RULES`) gives a trial at a rung: what ASHA ranks trials by.
    Raises KeyError for an unknown rule."""
    return RULES[rule](curve, horizon, warmup_fraction)
