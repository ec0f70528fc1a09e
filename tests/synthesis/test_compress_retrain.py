"""Retraining a compressed network: under a time budget on a fresh stratified sample of the training rows, under an
epoch budget on all of them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.data import Dataset
from core.training import train
from synthesis.budget import Budget
from synthesis.compress import retrain as retrain_module
from synthesis.compress.context import Context, Options
from synthesis.compress.retrain import retrain
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
        assert abs(len(d.y_train) - 300) <= 10 and d.y_val is data.y_val  # validation rows whole
        share = np.bincount(d.y_train, minlength=10) / len(d.y_train)
        assert np.abs(share - np.bincount(data.y_train, minlength=10) / len(data.y_train)).max() < 0.02
    first, second = ({r.tobytes() for r in d.x_train} for d in seen)
    assert first != second  # each retraining draws its own rows
    every = {r.tobytes() for r in data.x_train}
    assert first <= every and second <= every


def test_an_epoch_budget_retrains_on_every_training_row(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = retrained_rows(monkeypatch, Budget(epochs=4), rounds=1)
    assert len(seen) == 1 and seen[0] is digits()
