"""Retraining a compressed network: under a time budget on a fresh stratified sample of the training rows, under an
epoch budget on all of them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core import programs
from core.data import Dataset
from core.training import train
from synthesis.budget import Budget
from synthesis.compress import retrain as retrain_module
from synthesis.compress.context import Context, Options
from synthesis.compress.posttraining import BOUNDS, Sharing, started
from synthesis.compress.retrain import MIN_ROWS, plan_for, planned, retrain, warm_up
from tests.synthesis.compress_setup import CONFIG, Recorder, digits, start


def retrained_rows(monkeypatch: pytest.MonkeyPatch, budget: Budget, rounds: int) -> list[Dataset]:
    """The datasets ``rounds`` retrainings of the digits MLP trained on (the real training, watched)."""
    seen: list[Dataset] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[1])
        return train(*args, **kwargs)

    monkeypatch.setattr(retrain_module, "train", watched)
    monkeypatch.setattr(retrain_module, "RETRAIN_ROWS", 300)
    ctx = Context(digits(), budget, Options(), CONFIG, Recorder())
    state = start(ctx)
    for _ in range(rounds):
        retrain(ctx, state, 1.0 / rounds, "test", max_epochs=1)
    return seen


def test_a_time_budget_retrains_on_a_fresh_stratified_sample_of_the_training_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = retrained_rows(monkeypatch, Budget(seconds=600.0), rounds=2)
    data = digits()
    assert len(seen) == 2
    for d in seen:
        assert abs(len(d.y_train) - 300) <= 10 and d.y_val is data.y_val  # validation rows whole: below VAL_ROWS
        share = np.bincount(d.y_train, minlength=10) / len(d.y_train)
        assert np.abs(share - np.bincount(data.y_train, minlength=10) / len(data.y_train)).max() < 0.02
    first, second = ({r.tobytes() for r in d.x_train} for d in seen)
    assert first != second  # each retraining draws its own rows
    every = {r.tobytes() for r in data.x_train}
    assert first <= every and second <= every


def test_an_epoch_budget_retrains_on_every_training_row(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = retrained_rows(monkeypatch, Budget(epochs=4), rounds=1)
    assert len(seen) == 1 and seen[0] is digits()


@pytest.mark.parametrize(("limit", "want"), [(5000.0, (5, 1000)), (1200.0, (2, 1000)), (350.0, (1, 600)),
                                             (10.0, (1, MIN_ROWS))])
def test_a_retraining_is_planned_to_end_its_schedule_within_its_time(limit: float, want: tuple[int, int]) -> None:
    """1,000 rows at 0.5 s and 200 validation rows at 0.25 s: an epoch takes 550 s; below one epoch the rows are
    cut to what fits beside the validation pass, but not below MIN_ROWS."""
    assert planned(5, limit, 1000, 200, 0.5, 0.25) == want
    epochs, rows = want
    assert epochs * (rows * 0.5 + 50.0) <= limit or rows == MIN_ROWS


def test_the_plan_uses_the_last_retrainings_pace_or_the_validation_pass_before_one() -> None:
    ctx = Context(digits(), Budget(seconds=600.0), Options(), CONFIG, Recorder())
    rows = len(ctx.data.y_train)
    assert plan_for(ctx, 5, 0.01) == (5, rows)  # nothing measured yet: as asked
    start(ctx)  # measures the validation rows
    assert ctx.val_row_s is not None and ctx.val_row_s > 0
    val = len(ctx.data.y_val) * ctx.val_row_s
    assert plan_for(ctx, 5, val + rows * 2 * ctx.val_row_s * 1.5)[0] == 1  # one epoch at twice the evaluation's pace
    ctx.train_row_s = 1.0
    assert plan_for(ctx, 5, val + 600.0) == (1, 600)  # then at the measured pace: 600 rows fit


def test_a_time_budget_picks_the_best_epoch_on_a_part_of_many_validation_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrain_module, "VAL_ROWS", 50)
    seen = retrained_rows(monkeypatch, Budget(seconds=600.0), rounds=1)
    data = digits()
    assert len(seen[0].y_val) == 50 and np.array_equal(seen[0].x_val, data.x_val[:50])


def test_a_warm_up_compiles_the_step_a_retraining_then_runs_and_times_it() -> None:
    """The retraining of a network shared among other k than the warm-up's runs the program the warm-up compiled,
    and its first plan uses the pace the warm-up timed."""
    ctx = Context(digits(), Budget(seconds=600.0), Options(), CONFIG, Recorder())
    state = start(ctx)
    sharing = Sharing(ctx, state)
    warm_up(ctx, state, sharing.options)()
    assert ctx.train_row_s is not None and ctx.train_row_s > 0
    model = ctx.model(state.spec)
    step = next(jitted for key, jitted in programs._PROGRAMS.items() if key[0] is model)
    compiled = step._cache_size()
    shared = sharing.unmeasured(len(BOUNDS) // 2)
    assert shared is not None and set(shared.reparam.sizes) == set(sharing.options)
    trained = retrain(ctx, started(ctx, shared), 0.01, "test", max_epochs=1)
    assert trained.measured and step._cache_size() == compiled


def test_a_retraining_from_an_unmeasured_network_returns_what_it_trained_or_the_network_measured() -> None:
    ctx = Context(digits(), Budget(epochs=2), Options(), CONFIG, Recorder())
    state = start(ctx)
    shared = Sharing(ctx, state).unmeasured(len(BOUNDS) - 1)
    assert shared is not None and not shared.measured
    trained = retrain(ctx, shared, 0.5, "test", max_epochs=1)
    assert trained.measured and trained.variables is not shared.variables
    events = [p for kind, p in ctx.monitor.events if kind == "compress_retrain"]  # type: ignore[attr-defined]
    assert events[-1]["start_accuracy"] is None
    ctx.budget.spend_epochs(2)  # nothing left: the start itself, measured
    kept = retrain(ctx, shared, 0.5, "test", max_epochs=1)
    assert kept.measured and kept.variables is shared.variables


def test_a_retrainings_pace_is_its_wall_time_per_row_evaluation_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its steps' own time (``step_s``) leaves out the evaluation and the time between steps: a plan at that pace
    ran long (a 300 s MNIST job's second retraining, planned to two epochs, was cut in the second)."""
    results: list[Any] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        results.append(train(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(retrain_module, "train", watched)
    ctx = Context(digits(), Budget(seconds=600.0), Options(), CONFIG, Recorder())
    retrain(ctx, start(ctx), 0.01, "test", max_epochs=2)
    result = results[0]
    assert result.steps > 1 and ctx.train_row_s == result.elapsed_s / (result.steps * CONFIG.batch_size)
    assert ctx.train_row_s > result.step_s / CONFIG.batch_size
