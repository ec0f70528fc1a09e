"""Training loop: early stopping, deadline, determinism, progress, reparam; input pipeline."""

from __future__ import annotations

import itertools
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core import training
from core.compilation import metered
from core.data import Dataset, augment, epoch_indices, eval_batches, random_shift
from core.model import build
from core.reparam import Reparam
from core.training import Progress, TrainConfig, better, evaluate, predict_proba, train
from core.tree import flatten
from tests.core.specs import quadrant_data, tiny_spec


@pytest.fixture(scope="module")
def data() -> Dataset:
    x, y = quadrant_data(160, seed=0)
    xv, yv = quadrant_data(40, seed=1)
    return Dataset(x, y, xv, yv)


@pytest.fixture(scope="module")
def early(data: Dataset) -> tuple[object, list[Progress]]:
    """A run that reaches its best validation accuracy early and then stalls."""
    reports: list[Progress] = []
    model = build(tiny_spec())
    config = TrainConfig(epochs=40, batch_size=32, learning_rate=0.02, patience=2, seed=0)
    result = train(model, data, config, on_progress=reports.append)
    return (model, result), reports


def leaves(tree: object) -> list[np.ndarray]:
    return [np.asarray(a) for a in jax.tree.leaves(tree)]


def test_early_stopping_restores_the_best_epoch(early, data: Dataset) -> None:
    (model, result), _ = early
    accs = [h["val_accuracy"] for h in result.history]
    assert result.stop_reason == "early_stopping"
    assert len(result.history) < 40
    assert len(result.history) == result.best_epoch + 2  # patience epochs after the best
    assert result.best_metric == max(accs)
    tied = [i for i, a in enumerate(accs) if a == max(accs)]  # ties go to the lowest validation loss
    assert result.best_epoch == min(tied, key=lambda i: result.history[i]["val_loss"]) + 1
    final = evaluate(model, result.variables, data.x_val, data.y_val)
    assert final["accuracy"] == result.best_metric
    best_loss = result.history[result.best_epoch - 1]["val_loss"]
    last_loss = result.history[-1]["val_loss"]
    assert final["loss"] == pytest.approx(best_loss, rel=1e-5)
    assert final["loss"] != pytest.approx(last_loss, rel=1e-5)  # not the last epoch's weights
    assert set(result.variables) == {"params", "batch_stats"}


def test_an_epoch_is_better_by_accuracy_then_by_loss() -> None:
    assert better({"accuracy": 0.9, "loss": 0.5}, 0.8, 0.1)
    assert not better({"accuracy": 0.8, "loss": 0.01}, 0.9, 0.5)
    assert better({"accuracy": 1.0, "loss": 0.05}, 1.0, 0.2)  # saturated accuracy: the lower loss wins
    assert not better({"accuracy": 1.0, "loss": 0.2}, 1.0, 0.05)
    assert not better({"accuracy": 1.0, "loss": float("nan")}, 1.0, 0.05)


def test_progress_reports_every_epoch_with_increasing_steps(early) -> None:
    (_, result), reports = early
    assert [p.epoch for p in reports] == list(range(1, len(result.history) + 1))
    steps = [p.step for p in reports]
    assert steps == sorted(set(steps)) and steps[-1] == result.steps
    assert all("val_accuracy" in p.metrics and "train_loss" in p.metrics for p in reports)
    assert all(a.elapsed_s <= b.elapsed_s for a, b in itertools.pairwise(reports))


def test_progress_every_n_steps(data: Dataset) -> None:
    reports: list[Progress] = []
    config = TrainConfig(epochs=2, batch_size=32, patience=None, progress_every=2)
    result = train(build(tiny_spec()), data, config, on_progress=reports.append)
    steps = [p.step for p in reports]
    assert steps == sorted(steps) and result.steps == 10
    assert len(reports) == 5 + 2  # steps 2, 4, 6, 8, 10 and two epoch ends


def test_check_runs_before_every_step_and_what_it_raises_ends_the_run(data: Dataset) -> None:
    class Stop(Exception):
        pass

    calls: list[int] = []
    reports: list[Progress] = []

    def check() -> None:
        calls.append(len(calls))
        if len(calls) == 8:  # mid-epoch: an epoch is 5 steps
            raise Stop

    config = TrainConfig(epochs=3, batch_size=32, patience=None, progress_every=1)
    with pytest.raises(Stop):
        train(build(tiny_spec()), data, config, on_progress=reports.append, check=check)
    assert len(calls) == 8 and [p.step for p in reports if "val_accuracy" not in p.metrics] == list(range(1, 8))
    assert len([p for p in reports if "val_accuracy" in p.metrics]) == 1  # the second epoch never ended


def test_deadline_stops_training(data: Dataset) -> None:
    model = build(tiny_spec())
    config = TrainConfig(epochs=50, batch_size=32, patience=None, time_limit_s=1e-3)
    result = train(model, data, config)
    assert result.stop_reason == "deadline"
    assert len(result.history) < 50 and result.steps < 50 * 5
    metrics = evaluate(model, result.variables, data.x_val, data.y_val)
    assert metrics["accuracy"] == result.best_metric and np.isfinite(metrics["loss"])


def test_the_first_steps_compilation_is_not_taken_for_a_steps_time(data: Dataset,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose first step (mostly compilation) takes most of its time limit trains on: its deadline is
    predicted from the steps after it. On a busy machine, taken as a step's time, it ended runs after one step."""
    clock = [0.0]
    make_step = training.make_train_step

    def slow_first_step(*args: Any, **kwargs: Any) -> Any:
        step, calls = make_step(*args, **kwargs), [0]

        def timed(*a: Any) -> Any:
            out = jax.block_until_ready(step(*a))
            calls[0] += 1
            clock[0] += 6.0 if calls[0] == 1 else 0.01
            return out

        return timed

    monkeypatch.setattr(training, "make_train_step", slow_first_step)
    monkeypatch.setattr(training, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    config = TrainConfig(epochs=4, batch_size=32, patience=None, time_limit_s=10.0)
    result = train(build(tiny_spec()), data, config)
    assert (result.stop_reason, result.steps) == ("completed", 4 * 5)
    assert result.step_s == pytest.approx(0.01)  # the step's time as timed, its compilation left out
    clock[0] = 0.0  # the deadline still binds once a step's time is known: 6 s, then about 10 steps of 0.01 s
    cut = train(build(tiny_spec()), data, TrainConfig(**{**config.__dict__, "time_limit_s": 6.105}))
    assert cut.stop_reason == "deadline" and 6 <= cut.steps <= 11 and clock[0] <= 6.105


def test_a_run_of_one_step_has_no_timed_step(data: Dataset) -> None:
    one = train(build(tiny_spec()), data, TrainConfig(epochs=1, batch_size=len(data.x_train), patience=None))
    assert one.steps == 1 and one.step_s == 0.0


def test_the_first_validation_pass_counts_against_the_deadline_before_it_is_timed(
        data: Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first epoch cut by its deadline leaves room for its validation pass (estimated from the step time), so
    the run ends by its time limit: counted as free, MNIST's pass ran 2.4 s past the final training's share."""
    clock = [0.0]
    make_step, evaluate_on_mesh = training.make_train_step, training.evaluate_on_mesh  # type: ignore[attr-defined]
    data = Dataset(data.x_train, data.y_train, *quadrant_data(400, seed=1))  # a pass worth more than a step
    cost = len(data.x_val) / 32 * training.EVAL_PER_STEP  # one second per step of 32 rows

    def one_second_steps(*args: Any, **kwargs: Any) -> Any:
        step = make_step(*args, **kwargs)

        def timed(*a: Any) -> Any:
            out = jax.block_until_ready(step(*a))
            clock[0] += 1.0
            return out

        return timed

    def timed_evaluation(*args: Any, **kwargs: Any) -> Any:
        clock[0] += cost
        return evaluate_on_mesh(*args, **kwargs)

    monkeypatch.setattr(training, "make_train_step", one_second_steps)
    monkeypatch.setattr(training, "evaluate_on_mesh", timed_evaluation)
    monkeypatch.setattr(training, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    limit = 4.5 + cost  # time for four of the epoch's five steps and the pass
    cut = train(build(tiny_spec()), data, TrainConfig(epochs=3, batch_size=32, patience=None, time_limit_s=limit))
    assert cut.stop_reason == "deadline" and len(cut.history) == 1 and 1 <= cut.steps < 5
    assert clock[0] <= limit


def test_same_seed_is_bit_identical_and_seeds_differ(data: Dataset) -> None:
    model = build(tiny_spec(dropout=True))
    config = TrainConfig(epochs=2, batch_size=32, patience=None, max_shift=1, flip=True, seed=3)
    a = train(model, data, config)
    b = train(model, data, config)
    c = train(model, data, TrainConfig(**{**config.__dict__, "seed": 4}))
    for x, y in zip(leaves(a.variables), leaves(b.variables), strict=True):
        np.testing.assert_array_equal(x, y)
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
    assert any(not np.array_equal(x, y)
               for x, y in zip(leaves(a.variables), leaves(c.variables), strict=True))


def test_data_parallel_matches_one_device(data: Dataset) -> None:
    assert jax.local_device_count() == 2  # tests/conftest.py
    model = build(tiny_spec(dropout=True))
    config = TrainConfig(epochs=2, batch_size=32, patience=None, max_shift=1, flip=True)
    one = train(model, data, config, devices=jax.local_devices()[:1])
    two = train(model, data, config)
    for x, y in zip(leaves(one.variables), leaves(two.variables), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_reparam_keeps_pruned_weights_zero_and_shared_weights_on_the_codebook(
    data: Dataset,
) -> None:
    model = build(tiny_spec(batch_norm=False))
    variables = model.init(jax.random.key(0))
    kernel = np.asarray(variables["params"]["out"]["kernel"])
    mask = (np.random.default_rng(0).random(kernel.shape) < 0.5).astype(np.float32)
    conv = variables["params"]["conv"]["kernel"]
    idx = np.random.default_rng(1).integers(0, 3, conv.shape).astype(np.int32)
    reparam = Reparam(masks={"out/kernel": jnp.asarray(mask)},
                      indices={"conv/kernel": jnp.asarray(idx)}, sizes={"conv/kernel": 3})
    config = TrainConfig(epochs=2, batch_size=32, patience=None, weight_decay=0.1)
    result = train(model, data, config, variables=variables, reparam=reparam)
    trained = np.asarray(result.variables["params"]["out"]["kernel"])
    assert np.all(trained[mask == 0] == 0.0)
    assert not np.allclose(trained[mask == 1], kernel[mask == 1])  # the rest did train
    codebook = np.asarray(result.trainable["conv"]["kernel"])
    assert codebook.shape == (3,)
    np.testing.assert_array_equal(np.asarray(result.variables["params"]["conv"]["kernel"]),
                                  codebook[idx])
    assert set(flatten(result.trainable)) == set(flatten(result.variables["params"]))
    before = model.init(jax.random.key(0))  # the caller's variables survive buffer donation
    for x, y in zip(leaves(variables), leaves(before), strict=True):
        np.testing.assert_array_equal(x, y)


def test_runs_of_one_network_shared_among_other_ks_reuse_its_compiled_step(data: Dataset) -> None:
    model = build(tiny_spec(batch_norm=False))
    variables = model.init(jax.random.key(0))
    conv = variables["params"]["conv"]["kernel"]

    def shared(k: int) -> Reparam:
        idx = np.random.default_rng(k).integers(0, k, conv.shape).astype(np.int32)
        return Reparam(indices={"conv/kernel": jnp.asarray(idx)}, sizes={"conv/kernel": k})

    config = TrainConfig(epochs=1, batch_size=32, patience=None)
    train(model, data, config, variables=variables, reparam=shared(16))
    with metered() as meter:
        result = train(model, data, replace(config, epochs=2, seed=3), variables=variables, reparam=shared(5))
    assert meter.programs == 0  # another k, length and seed: the same program
    assert np.asarray(result.trainable["conv"]["kernel"]).shape == (5,)


def test_predict_proba_agrees_with_evaluate(early, data: Dataset) -> None:
    (model, result), _ = early
    x, y = data.x_val[:7], data.y_val[:7]  # 7 rows: padded batches on 2 devices
    probs = predict_proba(model, result.variables, x, batch_size=4)
    assert probs.shape == (7, 4)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    metrics = evaluate(model, result.variables, x, y, batch_size=4)
    assert metrics["accuracy"] == pytest.approx(np.mean(probs.argmax(axis=1) == y))
    expected_loss = -np.mean(np.log(probs[np.arange(7), y]))
    assert metrics["loss"] == pytest.approx(expected_loss, rel=1e-4)
    # the cross-entropy against uniform targets, padded rows excluded: with the loss, any smoothed target's
    assert metrics["uniform_loss"] == pytest.approx(-np.mean(np.log(probs)), rel=1e-4)


def test_config_rejects_out_of_range_values() -> None:
    with pytest.raises(ValueError, match="learning_rate"):
        TrainConfig(learning_rate=0.0)
    with pytest.raises(ValueError, match="patience"):
        TrainConfig(patience=0)
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="rmsprop")
    with pytest.raises(ValueError, match="momentum"):
        TrainConfig(optimizer="sgd", momentum=1.0)


def test_sgd_takes_nesterov_steps_with_weight_decay_added_to_the_kernels_gradient() -> None:
    config = TrainConfig(optimizer="sgd", learning_rate=0.1, weight_decay=0.01, warmup_fraction=0.0, momentum=0.9)
    optimizer = training.make_optimizer(config, total_steps=1000)
    params = {"kernel": jnp.full((2, 2), 2.0), "bias": jnp.full((2,), 2.0)}
    grads = {"kernel": jnp.full((2, 2), 0.5), "bias": jnp.full((2,), 0.5)}
    state = optimizer.init(params)
    updates, state = optimizer.update(grads, state, params)
    # first step: momentum buffer = g', Nesterov update = -lr (g' + 0.9 g'), g' = g + wd * w for kernels only
    np.testing.assert_allclose(updates["kernel"], -0.1 * 1.9 * (0.5 + 0.01 * 2.0), rtol=1e-5)
    np.testing.assert_allclose(updates["bias"], -0.1 * 1.9 * 0.5, rtol=1e-5)
    updates, _ = optimizer.update(grads, state, params)  # second: buffer 1.9 g', update -lr (g' + 0.9 * 1.9 g')
    lr = float(optax.warmup_cosine_decay_schedule(0.0, 0.1, 0, 1000)(1))
    np.testing.assert_allclose(updates["bias"], -lr * (0.5 + 0.9 * 1.9 * 0.5), rtol=1e-5)
    adamw = training.make_optimizer(replace(config, optimizer="adamw"), total_steps=1000)
    first, _ = adamw.update(grads, adamw.init(params), params)
    assert not np.allclose(first["bias"], updates["bias"])


def test_sgd_trains_a_network(data: Dataset) -> None:
    model = build(tiny_spec())
    config = TrainConfig(epochs=15, batch_size=32, learning_rate=0.1, optimizer="sgd", patience=None, seed=0)
    result = train(model, data, config)
    assert result.history[0]["train_loss"] > result.history[-1]["train_loss"]
    assert result.best_metric >= 0.9


# --- input pipeline -------------------------------------------------------------------------


def test_epoch_indices_cover_every_sample_and_wrap_the_last_batch() -> None:
    idx = epoch_indices(10, 4, seed=0, epoch=1)
    assert idx.shape == (3, 4)
    assert set(idx.ravel()) == set(range(10))
    np.testing.assert_array_equal(idx.ravel()[10:], idx.ravel()[:2])  # wrap-around padding
    np.testing.assert_array_equal(idx, epoch_indices(10, 4, seed=0, epoch=1))
    assert not np.array_equal(idx, epoch_indices(10, 4, seed=0, epoch=2))


def test_eval_batches_pad_with_invalid_rows() -> None:
    x = np.arange(5, dtype=np.float32)[:, None]
    batches = list(eval_batches(x, np.arange(5), 2))
    assert [b[0].shape for b in batches] == [(2, 1)] * 3
    np.testing.assert_array_equal(np.concatenate([b[2] for b in batches]), [1, 1, 1, 1, 1, 0])


def test_augment_keeps_shapes_and_flips_only_when_asked() -> None:
    x = jnp.asarray(np.random.default_rng(0).normal(size=(16, 5, 5, 2)), jnp.float32)
    key = jax.random.key(0)
    assert augment(x, key, max_shift=2, flip=True).shape == x.shape
    np.testing.assert_array_equal(augment(x, key), x)  # nothing asked, nothing done
    flipped = np.asarray(augment(x, key, flip=True))
    mirrored = np.asarray(x)[:, :, ::-1, :]
    same = np.all(flipped == np.asarray(x), axis=(1, 2, 3))
    flips = np.all(flipped == mirrored, axis=(1, 2, 3))
    assert np.all(same | flips) and flips.any() and same.any()
    seq = jnp.ones((4, 7, 3))
    np.testing.assert_array_equal(augment(seq, key, max_shift=2, flip=True), seq)  # not an image


def test_random_shift_crops_an_edge_padded_image() -> None:
    x = jnp.arange(2 * 4 * 4, dtype=jnp.float32).reshape(2, 4, 4, 1)
    out = np.asarray(random_shift(x, jax.random.key(1), 1))
    padded = np.pad(np.asarray(x), ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
    for i in range(2):
        crops = [padded[i, r : r + 4, c : c + 4] for r in range(3) for c in range(3)]
        assert any(np.array_equal(out[i], crop) for crop in crops)


def test_default_shift_suits_the_modality_and_image_size() -> None:
    from core.train_config import shift_for

    default = TrainConfig()
    assert shift_for(default, "image", (28, 28, 1)) == 2
    assert shift_for(default, "image", (8, 8, 1)) == 1
    assert shift_for(default, "text", (64,)) == 0
    assert shift_for(TrainConfig(max_shift=0), "image", (28, 28, 1)) == 0
    assert shift_for(TrainConfig(max_shift=3), "image", (8, 8, 1)) == 3


def test_a_run_until_its_deadline_replans_its_epochs_to_fill_the_time(data: Dataset) -> None:
    """With ``until_deadline`` the schedule is planned in seconds: a first plan of 2 epochs with ample time left
    grows (to its cap of twice the plan); without it the run ends at its plan."""
    config = TrainConfig(epochs=2, batch_size=32, patience=None, time_limit_s=600.0, seed=0)
    planned = train(build(tiny_spec()), data, config)
    timed = train(build(tiny_spec()), data, replace(config, until_deadline=True))
    assert len(planned.history) == 2 and planned.stop_reason == "completed"
    assert len(timed.history) == 4 and timed.stop_reason == "completed"


def test_the_replanned_epochs_fit_the_time_left_and_never_undo_an_epoch() -> None:
    assert training.replanned(3, 10, seconds_left=0.0, epoch_s=1.0) == 3  # no time: stop after this epoch
    assert training.replanned(1, 10, seconds_left=5.0, epoch_s=1.0) == 1 + int(training.UNTIL_DEADLINE_MARGIN * 5)
    assert training.replanned(1, 10, seconds_left=1e6, epoch_s=1.0) == 20  # at most twice the first plan
    assert training.replanned(2, 10, seconds_left=0.5, epoch_s=1.0) == 2  # less than an epoch left


def test_a_run_that_keeps_its_last_weights_returns_the_last_epoch(early, data: Dataset) -> None:
    """``keep_last`` (the validation rows are among the training rows): the last epoch's weights come back, where
    the same run keeping its best validated epoch stops and returns an earlier one."""
    (model, best_run), _ = early
    assert best_run.best_epoch < len(best_run.history)
    config = TrainConfig(epochs=12, batch_size=32, learning_rate=0.02, patience=2, seed=0, keep_last=True)
    last = train(model, data, config)
    assert last.best_epoch == len(last.history) == 12
    assert last.best_metric == last.history[-1]["val_accuracy"]
    assert evaluate(model, last.variables, data.x_val, data.y_val)["accuracy"] == last.best_metric


def test_a_run_whose_first_epoch_outlasts_its_deadline_ends_its_schedule_before_it(
        data: Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    """``until_deadline`` with a plan far longer than the time (50 epochs of 40 steps, room for under 30):
    the schedule is shortened within the first epoch and ends on its own (``completed``), not cut by the deadline
    at its peak rate. A fake clock advances half a second on every reading, so a step takes one second."""
    clock = iter(np.arange(0.0, 1e6, 0.5))
    monkeypatch.setattr(training, "time", SimpleNamespace(perf_counter=lambda: float(next(clock))))
    config = TrainConfig(epochs=50, batch_size=4, patience=None, time_limit_s=30.0, seed=0)
    cut = train(build(tiny_spec()), data, config)
    timed = train(build(tiny_spec()), data, replace(config, until_deadline=True))
    assert cut.stop_reason == "deadline" and cut.steps < 40
    assert timed.stop_reason == "completed" and training.TIMED_STEPS < timed.steps < 40
    assert len(timed.history) == 1


def test_a_shortened_schedule_keeps_its_warm_up_share() -> None:
    from core.step import TrainStep

    step = TrainStep(None, None, np.asarray([150, 1000], np.int32), None)
    step.retime(100)
    assert step.lengths == (15, 100)
    step.retime(2000)  # a longer run keeps the planned warm-up steps
    assert step.lengths == (150, 2000)


def test_a_schedule_is_shortened_only_to_the_steps_that_fit() -> None:
    margin = training.UNTIL_DEADLINE_MARGIN
    assert training.shortened(10, 1000, seconds_left=100.0, step_s=1.0) == 10 + int(margin * 100) - training.IN_FLIGHT
    assert training.shortened(10, 100, seconds_left=1000.0, step_s=1.0) == 100  # it fits: unchanged
    assert training.shortened(10, 100, seconds_left=0.0, step_s=1.0) == 11  # at least the next step
