"""Delivery's test figures: one pass of predicted probabilities gives the accuracy and loss `core.evaluation` does."""

from __future__ import annotations

import jax
import numpy as np

from core.evaluation import evaluate
from core.model import build
from synthesis.deliver import deliver
from tests.core.specs import quadrant_data, tiny_spec


def test_delivered_test_figures_match_the_core_evaluation() -> None:
    spec = tiny_spec()
    model = build(spec)
    variables = model.init(jax.random.key(0))
    x, y = quadrant_data(96, seed=3)
    delivered = deliver(spec, variables, x, y, x[:8])
    reference = evaluate(model, variables, x, y)
    assert np.isclose(delivered.metrics["test_accuracy"], reference["accuracy"])
    assert np.isclose(delivered.metrics["test_loss"], reference["loss"], rtol=1e-4)
    assert 0 <= delivered.metrics["test_ece"] <= 1
