"""Calibrated probabilities: a temperature fitted on held-out rows, folded into the weights that ship."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.data import Dataset
from core.evaluation import predict_proba
from core.model import build
from core.temperature import scale_logits
from core.train_config import TrainConfig
from core.training import train
from synthesis.budget import Budget
from synthesis.calibrate import TEMPERATURES, calibrate, calibrated_like, fit_temperature
from synthesis.engine import synthesize
from synthesis.explain.summary import calibration
from synthesis.interface import Options, Task
from synthesis.linear import scores
from synthesis.space import seeds, to_spec
from tests.datasets import digits_arrays
from tests.synthesis.conftest import LATENCY
from tests.synthesis.events import Events


def test_a_label_smoothed_network_is_calibrated_on_held_out_rows_without_changing_a_prediction(
        digits: tuple[Dataset, Any]) -> None:
    """Trained against targets smoothed by 0.3, the network is right far more often than it is sure; divided by the
    temperature fitted on the validation rows, its confidence on rows neither saw matches its accuracy."""
    data, info = digits
    x, y = digits_arrays()
    x_test, y_test = x[1::4].astype(np.float32), y[1::4]
    spec = to_spec(seeds(info)[0], info)
    config = TrainConfig(epochs=30, learning_rate=3e-3, label_smoothing=0.3, max_shift=0, patience=None)
    variables = train(build(spec), data, config).variables
    events = Events()
    shipped = calibrate(spec, variables, data.x_val, data.y_val, events)
    before, after = (predict_proba(build(spec), v, x_test) for v in (variables, shipped))
    np.testing.assert_array_equal(before.argmax(axis=1), after.argmax(axis=1))
    (event,) = events.of("calibration")
    assert event["temperature"] < 1 and event["loss_after"] < event["loss_before"]
    assert calibration(after, y_test)["ece"] < calibration(before, y_test)["ece"] / 2
    assert scores(np.log(after), y_test)[1] < scores(np.log(before), y_test)[1]


def test_without_held_out_rows_nothing_changes(digits: tuple[Dataset, Any]) -> None:
    data, info = digits
    spec = to_spec(seeds(info)[0], info)
    variables = build(spec).init(__import__("jax").random.key(0))
    events = Events()
    assert calibrate(spec, variables, data.x_val[:0], data.y_val[:0], events) is variables
    assert events.of("calibration") == []


def test_an_image_job_ships_calibrated_and_reports_its_test_calibration(digits_task: Task) -> None:
    """The refit network is calibrated on the validation rows it left out of its training; the model's metrics hold
    the test split's expected calibration error and reliability diagram."""
    events = Events()
    result = synthesize(digits_task, Budget(epochs=12), Options(seed=0, latency=LATENCY, compress=False), events)
    (event,) = events.of("calibration")
    assert event["rows"] == result.split["val"] // 2 and event["loss_after"] <= event["loss_before"]
    metrics = result.model.metrics
    bins = metrics["test_reliability"]
    assert sum(b["count"] for b in bins) == result.split["test"] and 0 <= metrics["test_ece"] <= 1


def test_a_compressed_network_takes_back_the_confidence_of_the_calibrated_one(digits: tuple[Dataset, Any]) -> None:
    """A copy of a network twice as sure of itself (its logits doubled, as fine-tuning may leave a compressed
    network) gets the temperature 2 back from the original's probabilities alone, and then returns them."""
    data, info = digits
    spec = to_spec(seeds(info)[0], info)
    variables = build(spec).init(__import__("jax").random.key(0))
    reference = predict_proba(build(spec), variables, data.x_val)
    sure = scale_logits(spec, variables, 2.0)
    events = Events()
    matched = calibrated_like(spec, sure, reference, data.x_val, events)
    assert events.of("compressed_calibration")[0]["temperature"] == pytest.approx(2.0, rel=0.05)
    np.testing.assert_allclose(predict_proba(build(spec), matched, data.x_val), reference, atol=0.02)
    assert not np.allclose(predict_proba(build(spec), sure, data.x_val), reference, atol=0.02)


def _calibrated_rows(rows: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels drawn from their softmax: a model calibrated at temperature 1 by construction."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=4.0, size=(rows, classes))
    p = np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))
    y = np.array([rng.choice(classes, p=row) for row in p])
    return logits, y


def test_wrong_held_out_labels_do_not_make_the_model_ship_unsure() -> None:
    """With a tenth of the held-out labels flipped at random, a temperature fitted alone softens a calibrated model
    to spread the flips over every prediction; fitted with the share of wrong labels, it stays near 1, the share
    is found, and on the true labels the probabilities stay calibrated."""
    logits, y = _calibrated_rows(4000, 10, 0)
    rng = np.random.default_rng(1)
    flipped = rng.random(len(y)) < 0.1
    noisy = np.where(flipped, (y + rng.integers(1, 10, len(y))) % 10, y)
    alone = min(TEMPERATURES, key=lambda t: scores(logits / t, noisy)[1])
    temperature, noise, _ = fit_temperature(logits, noisy)
    assert alone > 1.3 and 0.8 <= temperature <= 1.25 and 0.075 <= noise <= 0.15

    def ece(t: float) -> float:
        z = logits / t
        return float(calibration(np.exp(z - np.logaddexp.reduce(z, axis=1, keepdims=True)), y)["ece"])
    assert ece(temperature) < 0.03 < ece(alone)


def test_on_clean_labels_no_wrong_labels_are_assumed() -> None:
    logits, y = _calibrated_rows(4000, 10, 2)
    temperature, noise, loss = fit_temperature(logits * 2.0, y)  # twice as sure as it is right
    assert noise == 0.0 and temperature == pytest.approx(2.0, rel=0.1)
    assert loss == pytest.approx(min(scores(logits * 2.0 / t, y)[1] for t in TEMPERATURES), rel=1e-9)


def test_flips_concentrated_between_two_classes_are_allowed_for_too() -> None:
    """A third of two classes' labels swapped with each other: the wrong labels follow where the predictions and
    labels disagree, and the temperature stays near the one the true labels want."""
    logits, y = _calibrated_rows(4000, 10, 3)
    rng = np.random.default_rng(4)
    pair = np.isin(y, (3, 5)) & (rng.random(len(y)) < 1 / 3)
    noisy = np.where(pair, np.where(y == 3, 5, 3), y)
    alone = min(TEMPERATURES, key=lambda t: scores(logits / t, noisy)[1])
    temperature, noise, _ = fit_temperature(logits, noisy)
    assert alone > 1.15 and 0.85 <= temperature <= 1.15 and noise > 0
