"""Learning-curve extrapolation: accuracy on curves from known laws, ranking, fall-backs and range."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import spearmanr

from synthesis.curves import predict_final, rank_candidates, schedule_time

HORIZON = 20
SEEN = 4  # 20 % of the horizon


def law_curves(seed: int, count: int, noise: float) -> tuple[list[np.ndarray], np.ndarray]:
    """Curves over HORIZON epochs from saturating power laws and exponentials with random parameters, plus
    Gaussian noise; also the true (noise-free) best accuracy of each by HORIZON."""
    rng = np.random.default_rng(seed)
    t = np.arange(1.0, HORIZON + 1.0)
    curves, truth = [], []
    for i in range(count):
        a, b = rng.uniform(0.75, 0.99), rng.uniform(0.2, 0.7)
        clean = a - b * t ** -rng.uniform(0.4, 1.5) if i % 2 else a - b * np.exp(-rng.uniform(0.15, 1.0) * t)
        curves.append(np.clip(clean + rng.normal(0.0, noise, HORIZON), 0.0, 1.0))
        truth.append(clean.max())
    return curves, np.array(truth)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_predictions_on_known_laws_are_close_and_rank_well(seed: int) -> None:
    curves, truth = law_curves(seed, count=40, noise=0.003)
    predicted = np.array([predict_final(c[:SEEN], HORIZON) for c in curves])
    last = np.array([c[SEEN - 1] for c in curves])
    errors = np.abs(predicted - truth)
    assert np.median(errors) < 0.03 < np.median(np.abs(last - truth))
    assert np.mean(errors[1::2] < 0.03) >= 0.9  # power-law truths (exponentials look alike at first)
    assert spearmanr(predicted, truth).statistic >= 0.75


def test_extrapolation_beats_the_last_observed_value_on_crossing_curves() -> None:
    # a slow starter that ends best, a fast starter that saturates early, and one in between
    t = np.arange(1.0, HORIZON + 1.0)
    slow = 0.98 - 0.6 * t**-0.7
    fast = 0.90 - 0.3 * np.exp(-1.5 * t)
    middle = 0.94 - 0.5 * t**-1.0
    curves = [slow, fast, middle]
    truth = [c.max() for c in curves]
    assert [c[SEEN - 1] for c in curves].index(max(c[SEEN - 1] for c in curves)) == 1  # last value: fast leads
    assert rank_candidates([c[:SEEN] for c in curves], HORIZON) == list(np.argsort(truth)[::-1])


def test_noise_free_power_law_is_recovered() -> None:
    t = np.arange(1.0, HORIZON + 1.0)
    curve = 0.95 - 0.5 * t**-0.8
    assert predict_final(curve[:6], HORIZON) == pytest.approx(curve[-1], abs=0.005)


def test_schedule_time_spends_half_the_peak_rate_over_a_cosine_run() -> None:
    t = np.arange(0.0, HORIZON + 1.0)
    for warmup in (0.0, 0.05, 0.3):
        spent = schedule_time(t, HORIZON, warmup)
        assert spent[0] == 0.0
        assert spent[-1] == pytest.approx(HORIZON / 2)
        assert np.all(np.diff(spent) > 0)
        assert np.all(np.diff(spent) <= 1.0 + 1e-12)  # never faster than the peak rate
    assert schedule_time(np.array([1.0]), HORIZON, 0.0)[0] == pytest.approx(1.0, abs=0.01)


def test_a_curve_under_the_cosine_schedule_is_recovered_only_with_the_schedule() -> None:
    # progress follows a power law of the learning rate spent, as under core's warm-up + cosine schedule
    spent = schedule_time(np.arange(1.0, HORIZON + 1.0), HORIZON, 0.05)
    curve = 0.95 - 0.5 * spent**-0.8
    aware = predict_final(curve[:6], HORIZON, warmup_fraction=0.05)
    naive = predict_final(curve[:6], HORIZON)
    assert aware == pytest.approx(curve[-1], abs=0.005)
    assert abs(naive - curve[-1]) > 0.01  # against epochs the same curve has another shape


def test_prediction_does_not_fall_with_the_horizon() -> None:
    curves, _ = law_curves(seed=2, count=10, noise=0.01)
    for curve in curves:
        predictions = [predict_final(curve[:SEEN], h) for h in range(SEEN, 60)]
        assert all(b >= a - 1e-12 for a, b in itertools.pairwise(predictions))


def test_a_uniformly_better_curve_is_not_predicted_worse() -> None:
    curves, _ = law_curves(seed=3, count=10, noise=0.01)
    for curve in curves:
        for seen in (3, SEEN, 8):
            better = 1.0 - 0.7 * (1.0 - curve[:seen])  # every error 30 % smaller
            assert predict_final(better, HORIZON) >= predict_final(curve[:seen], HORIZON) - 1e-9


def test_short_curves_fall_back_to_what_was_observed() -> None:
    assert predict_final([0.42], 10) == 0.42
    assert predict_final([0.7, 0.6], 10) == 0.7
    assert predict_final([0.5, 0.7], 10) == 0.7  # two points: no trend told from noise
    assert 0.75 < predict_final([0.5, 0.7, 0.75], 10) < 1.0  # three rising points: extrapolated
    assert predict_final([0.3, 0.9, 0.6], 2) == 0.9  # horizon already observed


def test_saturated_and_constant_curves() -> None:
    assert predict_final([1.0, 1.0, 1.0], 10) == 1.0
    assert predict_final([0.0, 0.0, 0.0, 0.0], 10) == 0.0
    assert predict_final([0.8] * 6, 30) == pytest.approx(0.8)


def test_invalid_input_is_rejected() -> None:
    for curve, horizon in (([], 5), ([0.5, math.nan], 5), ([0.5, math.inf], 5), ([0.5], 0)):
        with pytest.raises(ValueError):
            predict_final(curve, horizon)
    with pytest.raises(ValueError):
        predict_final([0.5, 0.6, 0.7], 10, warmup_fraction=1.0)


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30), st.integers(1, 200),
       st.none() | st.floats(0.0, 0.9))
def test_any_curve_gives_a_finite_accuracy_no_lower_than_its_best(
    curve: list[float], horizon: int, warmup: float | None
) -> None:
    prediction = predict_final(curve, horizon, warmup)
    assert math.isfinite(prediction)
    assert max(curve[:horizon]) <= prediction <= 1.0
    if horizon <= len(curve):
        assert prediction == max(curve[:horizon])
