"""The flip test: flips are used where mirrored images keep their labels, and never where they swap them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.train_config import TrainConfig
from synthesis import final, trial
from synthesis.augment import FLIP_RETAINED, FlipTest
from synthesis.budget import Budget
from synthesis.engine import synthesize
from synthesis.interface import Options, Task
from tests.synthesis.conftest import LATENCY
from tests.synthesis.events import Events


def blobs(axis: int, rows: int = 1_000, seed: int = 0) -> Task:
    """8x8 noise images with a bright 2x2 blob: class 0 in the first half along `axis` (1: rows, top / bottom;
    2: columns, left / right), class 1 in the second half. Mirroring left-right swaps the classes only when the
    halves are left and right."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 60, (rows, 8, 8, 1)).astype(np.uint8)
    y = rng.integers(0, 2, rows)
    for i in range(rows):
        along, across = int(rng.integers(0, 3)) + 4 * int(y[i]), int(rng.integers(0, 7))
        r, c = (along, across) if axis == 1 else (across, along)
        x[i, r:r + 2, c:c + 2, 0] = 255
    return Task("image", x, y.astype(np.int64), 2)


def _flip_configs(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The `flip` of every training configuration the engine's final training runs with."""
    seen: list[bool] = []
    real = trial.run_trial

    def recording(spec: Any, config: TrainConfig, *args: Any, **kwargs: Any) -> Any:
        seen.append(config.flip)
        return real(spec, config, *args, **kwargs)

    monkeypatch.setattr(final, "run_trial", recording)
    return seen


@pytest.mark.parametrize(("axis", "flips"), [(1, True), (2, False)])
def test_the_final_training_flips_only_where_mirroring_keeps_the_labels(
        axis: int, flips: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    events, seen = Events(), _flip_configs(monkeypatch)
    result = synthesize(blobs(axis), Budget(epochs=6), Options(latency=LATENCY, compress=False), events)
    (test,) = events.of("augmentation")
    assert test["val_accuracy"] > 0.9  # the blob's half is easy to learn
    if flips:  # top / bottom: the mirror image is as easy
        assert test["mirrored_val_accuracy"] > 0.9 and test["retained"] >= FLIP_RETAINED
    else:  # left / right: the mirror image swaps the classes
        assert test["mirrored_val_accuracy"] < 0.2 and test["retained"] == 0.0
    assert test["flip"] is flips and seen and all(f is flips for f in seen)
    assert result.model.metrics["test_accuracy"] > 0.9


def test_text_gets_no_flip_test(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(1, 30, (300, 12)).astype(np.int32)
    y = (x[:, 0] > 15).astype(np.int64)
    events, seen = Events(), _flip_configs(monkeypatch)
    synthesize(Task("text", x, y, 2, vocab_size=31), Budget(epochs=4), Options(latency=LATENCY, compress=False),
               events)
    assert not events.of("augmentation") and seen and not any(seen)


@pytest.mark.parametrize(("accuracy", "mirrored", "chance", "retained"), [
    (0.9, 0.9, 0.1, 1.0), (0.9, 0.5, 0.1, 0.5), (0.9, 0.05, 0.1, 0.0), (0.1, 0.1, 0.1, 0.0), (0.6, 0.9, 0.5, 4.0)])
def test_retained_is_the_share_of_accuracy_above_chance_kept(accuracy: float, mirrored: float, chance: float,
                                                             retained: float) -> None:
    test = FlipTest(accuracy, mirrored, chance)
    assert test.retained == pytest.approx(retained)
    assert test.flip is (retained >= FLIP_RETAINED)
    assert test.to_dict()["flip"] is test.flip
