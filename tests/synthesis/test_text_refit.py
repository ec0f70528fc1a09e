"""A text network that ships is trained again on the training and validation rows for the epochs validation kept."""

from __future__ import annotations

from typing import cast

import numpy as np

from core.train_config import TrainConfig
from synthesis.budget import Budget
from synthesis.engine import synthesize
from synthesis.final import CALIBRATION_ROWS, Final, refit_network
from synthesis.interface import Options, Task
from synthesis.search import Search
from synthesis.space import seeds
from synthesis.trial import Trial, TrialResult
from tests.synthesis.conftest import LATENCY
from tests.synthesis.events import Events
from tests.synthesis.test_linear_floor import LENGTH, VOCAB, WORDS, bag_task, halves, info_of


def word_task(n: int = 480, classes: int = 3, seed: int = 0) -> Task:
    """Rows whose class is in their first word id (10 + class) and not in their bag (random ids): a network reads
    it, the floor (the bag only) cannot."""
    task = bag_task(n=n, classes=classes, seed=seed)
    rng = np.random.default_rng(seed + 1)
    x = task.x.copy()
    x[:, 0] = 10 + task.y
    x[:, LENGTH:] = np.sort(rng.integers(40, VOCAB, (n, x.shape[1] - LENGTH)), axis=1)
    return Task("text", x, task.y, classes, vocab_size=64, bag_start=LENGTH, bag_vocab=VOCAB, bag_words=WORDS)


def test_the_network_that_ships_trains_again_on_all_labelled_rows_for_the_epochs_validation_kept() -> None:
    events = Events()
    result = synthesize(word_task(), Budget(epochs=30), Options(seed=0, latency=LATENCY, compress=False), events)
    (choice,) = events.of("ensemble")
    assert choice["chosen"] in ("network", "ensemble")  # the floor cannot read the class
    final = events.of("final")[-1]
    (refit,) = [e for e in events.of("refit") if e["model"] == "network"]
    split = result.split
    assert refit["candidate"] == final["candidate"] and refit["status"] == "completed"
    left_out = min(CALIBRATION_ROWS, split["val"] // 2)  # the validation rows calibration takes
    assert refit["epochs"] == final["kept_epoch"] >= 1 and refit["rows"] == split["train"] + split["val"] - left_out
    metrics = result.model.metrics
    assert metrics["refit"] is True and metrics["val_accuracy"] is None  # validation rows trained what ships
    assert metrics["test_accuracy"] >= 0.8  # chance: a third


def test_a_refit_that_cannot_fit_the_budget_left_is_skipped_and_the_validated_weights_ship() -> None:
    task = bag_task()
    info, data = info_of(task), halves(task)
    network = next(c for c in seeds(info) if c.origin == "seed:default-text-cnn")
    weights: dict[str, object] = {"params": {}}
    run = TrialResult(epochs=4, seconds=2.0, variables=weights, best_epoch=3)
    final = Final(Trial(1, network), weights, 2.0, False, 0.9, TrainConfig(epochs=4), None, run)
    budget = Budget(epochs=10)
    budget.spend_epochs(9)  # one epoch left, three kept
    events = Events()
    assert refit_network(final, cast(Search, None), info, data, budget, events) is None
    (skipped,) = events.of("refit")
    assert skipped["status"] == "skipped" and skipped["epochs"] == 3 and final.refit is False
    final.refit = True  # an image network trained on the validation rows already: nothing to refit
    assert refit_network(final, cast(Search, None), info, data, Budget(epochs=10), Events()) is None
