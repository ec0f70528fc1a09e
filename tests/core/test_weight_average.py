"""The moving average of the weights (``TrainConfig.ema_decay``): its update, and a run that evaluates and returns
it while training exactly as without it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.data import Dataset
from core.model import build
from core.step import init_state, make_optimizer, make_train_step
from core.training import TrainConfig, evaluate, train
from tests.core.specs import quadrant_data, tiny_spec


@pytest.fixture(scope="module")
def data() -> Dataset:
    x, y = quadrant_data(160, seed=0)
    xv, yv = quadrant_data(40, seed=1)
    return Dataset(x, y, xv, yv)


def leaves(tree: object) -> list[np.ndarray]:
    return [np.asarray(a) for a in jax.tree.leaves(tree)]


def test_each_step_moves_the_average_towards_the_new_params_at_the_warmed_up_decay(data: Dataset) -> None:
    model = build(tiny_spec())
    config = TrainConfig(batch_size=32, learning_rate=0.1, optimizer="sgd", ema_decay=0.99)
    optimizer = make_optimizer(config, 100)
    state = init_state(model, model.init(jax.random.key(0)), optimizer, None, average=True)
    step = make_train_step(model, optimizer, config)
    x, y, key = jnp.asarray(data.x_train[:32]), jnp.asarray(data.y_train[:32]), jax.random.key(1)
    before = leaves(state.params)
    for t in range(3):
        old = leaves(state.average)
        state, _ = step(state, x, y, key)
        decay = min(0.99, (1 + t) / (10 + t))  # 0.1, 0.18, 0.25: the early average follows the params
        for avg, o, p in zip(leaves(state.average), old, leaves(state.params), strict=True):
            np.testing.assert_allclose(avg, decay * o + (1 - decay) * p, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(a, b) for a, b in zip(leaves(state.params), before, strict=True))
    assert any(not np.allclose(a, p) for a, p in zip(leaves(state.average), leaves(state.params), strict=True))


def test_a_state_without_the_average_carries_none_and_its_weights_are_the_params(data: Dataset) -> None:
    model = build(tiny_spec())
    state = init_state(model, model.init(jax.random.key(0)), make_optimizer(TrainConfig(), 10), None)
    assert state.average is None and state.weights is state.params


def test_a_run_with_the_average_trains_the_same_and_returns_the_average(data: Dataset) -> None:
    model = build(tiny_spec())
    config = TrainConfig(epochs=4, batch_size=32, learning_rate=0.1, optimizer="sgd", patience=None, seed=0,
                         keep_last=True)
    plain = train(model, data, config)
    averaged = train(model, data, TrainConfig(**{**config.__dict__, "ema_decay": 0.9}))
    # the average does not feed back into training: the same steps, the same training losses
    assert [h["train_loss"] for h in plain.history] == [h["train_loss"] for h in averaged.history]
    assert any(not np.allclose(a, b) for a, b in zip(leaves(plain.variables["params"]),
                                                    leaves(averaged.variables["params"]), strict=True))
    # what each epoch scored and what comes back are the average's weights
    assert evaluate(model, averaged.variables, data.x_val, data.y_val)["loss"] == pytest.approx(
        averaged.history[-1]["val_loss"], rel=1e-5)
    assert averaged.history[-1]["val_loss"] != pytest.approx(plain.history[-1]["val_loss"], rel=1e-5)


def test_the_decay_must_lie_between_0_and_1() -> None:
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="ema_decay"):
            TrainConfig(ema_decay=bad)
