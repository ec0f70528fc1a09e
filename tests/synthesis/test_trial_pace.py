"""A trial's pace (seconds a step) for planning the final training: the steady one, not its first steps'."""

from __future__ import annotations

from typing import Any

import pytest

from core.data import Dataset
from core.train_config import Progress, TrainConfig, TrainResult
from synthesis import trial
from synthesis.space import seeds, to_spec

# (step, seconds since the start) of the steps' progress, then each epoch's end with its validation's seconds:
# the first steps ran at 0.25 s (start-up), the second epoch's 20 steps in 1.5 s of its 2 s (validation 0.5 s)
STEP_MARKS = [(8, 2.0), (16, 4.0)]
EPOCH_ENDS = [(1, 20, 5.0, 0.4), (2, 40, 7.0, 0.5)]


def _scripted(ends: list[tuple[int, int, float, float]]) -> Any:
    def train(_model: Any, data: Dataset, config: TrainConfig, *, on_progress: Any = None, **_: Any) -> TrainResult:
        for step, seconds in STEP_MARKS:
            on_progress(Progress(1, step, {"loss": 1.0}, seconds))
        for epoch, step, seconds, eval_s in ends:
            on_progress(Progress(epoch, step, {"val_accuracy": 0.5, "eval_s": eval_s}, seconds))
        history = tuple({"val_loss": 1.0, "val_uniform_loss": 1.0} for _ in ends)
        return TrainResult({}, history, 1, 0.5, "completed", ends[-1][2], ends[-1][1])
    return train


def test_the_pace_comes_from_the_latest_whole_epoch_after_the_first(monkeypatch: pytest.MonkeyPatch,
                                                                      digits: tuple[Dataset, Any]) -> None:
    data, info = digits
    candidate = seeds(info)[0]
    config = candidate.hparams.to_train_config(epochs=2, seed=0, time_limit_s=None, patience=None)
    monkeypatch.setattr(trial, "train", _scripted(EPOCH_ENDS))
    result = trial.run_trial(to_spec(candidate, info), config, data, lambda _curve: True)
    assert result.step_s == pytest.approx((7.0 - 5.0 - 0.5) / 20)  # not the first steps' 0.25 s


def test_a_one_epoch_trial_keeps_the_pace_of_its_first_steps(monkeypatch: pytest.MonkeyPatch,
                                                             digits: tuple[Dataset, Any]) -> None:
    data, info = digits
    candidate = seeds(info)[0]
    config = candidate.hparams.to_train_config(epochs=1, seed=0, time_limit_s=None, patience=None)
    monkeypatch.setattr(trial, "train", _scripted(EPOCH_ENDS[:1]))
    result = trial.run_trial(to_spec(candidate, info), config, data, lambda _curve: True)
    assert result.step_s == pytest.approx(0.25)
    assert result.compile_s == pytest.approx(0.0)  # 2 s at step 8 is 8 steps at 0.25 s
