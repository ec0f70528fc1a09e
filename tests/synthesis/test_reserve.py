"""The time kept after final training for compression, delivery and the reports (`synthesis.reserve`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.data import Dataset
from core.train_config import TrainConfig
from synthesis.budget import Budget, Reserve, Schedule
from synthesis.fine import fine_synthesis
from synthesis.reserve import after_training
from synthesis.trial import TrialResult
from tests.synthesis.compress_setup import Recorder


def test_a_reserve_beyond_the_later_shares_ends_final_training_and_compression_earlier() -> None:
    shares = Schedule(search=0.2, fine=0.05, final=0.69, delivery=0.02, explain=0.04)
    budget = Budget(seconds=100, schedule=shares, clock=lambda: 0.0)
    assert budget.final_end() == pytest.approx(0.89) and budget.fine_end() == pytest.approx(0.94)
    budget.reserve = Reserve(compression_s=5.0, delivery_s=5.0)  # within the shares (5 + 6 s): no change
    assert budget.final_end() == pytest.approx(0.89) and budget.fine_end() == pytest.approx(0.94)
    budget.reserve = Reserve(compression_s=20.0, delivery_s=30.0)
    assert budget.final_end() == pytest.approx(0.5) and budget.fine_end() == pytest.approx(0.7)
    budget.reserve = Reserve(compression_s=200.0, delivery_s=300.0)  # never before the search's end
    assert budget.final_end() == pytest.approx(0.2) and budget.fine_end() == pytest.approx(0.2)


def test_an_epoch_budget_keeps_its_shares_whatever_the_reserve() -> None:
    budget = Budget(epochs=100, reserve=Reserve(compression_s=1e6, delivery_s=1e6))
    assert budget.final_end() == pytest.approx(0.75) and budget.fine_end() == pytest.approx(0.9)


def test_the_reserve_grows_with_the_rows_each_stage_reads_and_the_networks_pace() -> None:
    trial = TrialResult(step_s=0.128, compile_s=2.0)  # 1 ms per row at batch 128
    small = after_training(trial, 128, (1_000, 100, 100), compress=True, explain=True)
    large = after_training(trial, 128, (50_000, 6_000, 6_000), compress=True, explain=True)
    assert 0 < small.compression_s < large.compression_s and 0 < small.delivery_s < large.delivery_s
    slower = after_training(TrialResult(step_s=0.256, compile_s=2.0), 128, (50_000, 6_000, 6_000), True, True)
    assert slower.compression_s > large.compression_s and slower.delivery_s > large.delivery_s
    bare = after_training(trial, 128, (50_000, 6_000, 6_000), compress=False, explain=False)
    assert bare.compression_s == 0 and 0 < bare.delivery_s < large.delivery_s
    assert after_training(TrialResult(), 128, (50_000, 6_000, 6_000), True, True) == Reserve()  # not measured


def test_compression_is_skipped_when_its_share_cannot_hold_half_its_fixed_costs() -> None:
    rng = np.random.default_rng(0)
    data = Dataset(rng.normal(size=(8, 4)).astype(np.float32), np.zeros(8, np.int64),
                   rng.normal(size=(4, 4)).astype(np.float32), np.zeros(4, np.int64))
    now = [0.0]
    budget = Budget(seconds=100, clock=lambda: now[0], reserve=Reserve(compression_s=30.0, delivery_s=10.0))
    now[0] = 80.0
    assert budget.left(budget.fine_end()) == pytest.approx(10.0)  # 10 s left, 75 % of it over a second
    recorder = Recorder()
    spec: Any = None  # never read: the stage is skipped before it starts
    out = fine_synthesis(spec, {}, data, (data.x_val, data.y_val), budget, TrainConfig(), 0.01, 0, recorder)
    assert out.variant is None
    assert [k for k, _ in recorder.events] == ["compress_skipped"]
