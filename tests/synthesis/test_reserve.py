"""The time kept after final training for compression, delivery and the reports (`synthesis.reserve`)."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

from core.data import Dataset
from core.spec import Spec
from core.train_config import TrainConfig
from synthesis.budget import IMAGES, Budget, Reserve, Schedule
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
    budget = Budget(seconds=3600)
    trial = TrialResult(eval_s=0.6, compile_s=2.0)  # 0.1 ms a row over 6,000 validation rows
    small = after_training(trial, 128, (1_000, 6_000, 100), budget, compress=True, explain=True)
    large = after_training(trial, 128, (50_000, 6_000, 6_000), budget, compress=True, explain=True)
    assert small.compression_s > 0 and 0 < small.delivery_s < large.delivery_s
    slower = after_training(TrialResult(eval_s=1.2, compile_s=2.0), 128, (50_000, 6_000, 6_000), budget, True, True)
    assert slower.compression_s > large.compression_s and slower.delivery_s > large.delivery_s
    bare = after_training(trial, 128, (50_000, 6_000, 6_000), budget, compress=False, explain=False)
    assert bare.compression_s == 0 and not bare.compress and 0 < bare.delivery_s < large.delivery_s
    stepped = after_training(TrialResult(step_s=0.128, compile_s=2.0), 128, (50_000, 6_000, 6_000), budget, True, True)
    assert stepped.delivery_s > 0  # without a timed validation pass, the training step's pace
    assert after_training(TrialResult(), 128, (50_000, 6_000, 6_000), budget, True, True) == Reserve()


def test_compression_that_cannot_fit_twice_its_share_is_left_out_and_its_share_trains() -> None:
    trial = TrialResult(eval_s=6.0, compile_s=5.0)  # 1 ms a row over 6,000 validation rows: about 58 s to compress
    long = after_training(trial, 128, (50_000, 6_000, 6_000), Budget(seconds=3600), True, True)
    assert long.compress and long.compression_s > 50
    short = Budget(seconds=300, schedule=IMAGES)  # a fine share of 15 s
    short.reserve = after_training(trial, 128, (50_000, 6_000, 6_000), short, True, True)
    assert not short.reserve.compress and short.reserve.compression_s == 0
    assert short.final_end() == pytest.approx(1 - short.reserve.delivery_s / 300)  # before the images' 0.94
    recorder, spec = Recorder(), cast(Spec, None)  # never read: the stage is skipped before it starts
    assert fine_synthesis(spec, {}, _data(), (np.zeros((0, 4)), np.zeros(0)), short, TrainConfig(), 0.01, 0,
                          recorder).variant is None
    assert [k for k, _ in recorder.events] == ["compress_skipped"]


def _data() -> Dataset:
    rng = np.random.default_rng(0)
    return Dataset(rng.normal(size=(8, 4)).astype(np.float32), np.zeros(8, np.int64),
                   rng.normal(size=(4, 4)).astype(np.float32), np.zeros(4, np.int64))


def test_compression_is_skipped_when_its_share_cannot_hold_half_its_fixed_costs() -> None:
    data = _data()
    now = [0.0]
    budget = Budget(seconds=100, clock=lambda: now[0], reserve=Reserve(compression_s=30.0, delivery_s=10.0))
    now[0] = 80.0
    assert budget.left(budget.fine_end()) == pytest.approx(10.0)  # 10 s left, 75 % of it over a second
    recorder = Recorder()
    spec = cast(Spec, None)  # never read: the stage is skipped before it starts
    out = fine_synthesis(spec, {}, data, (data.x_val, data.y_val), budget, TrainConfig(), 0.01, 0, recorder)
    assert out.variant is None
    assert [k for k, _ in recorder.events] == ["compress_skipped"]
