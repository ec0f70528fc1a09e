"""Budgets and their tiers, the stratified split that keeps duplicates together, the Pareto front, the pace."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.routes.jobs import _budget
from domain.rules import TIERS, tier_for
from infra.settings import Settings
from synthesis.budget import STAGES, Budget, Schedule, StageClock
from synthesis.pace import Pace
from synthesis.pareto import dominates, pareto_front
from synthesis.split import stratified_sample, stratified_split
from synthesis.trial import TrialResult


@pytest.mark.parametrize("samples", [1, 10_000, 10_001, 100_000, 100_001, 5_000_000])
def test_the_api_chooses_the_tier_the_rule_gives(samples: int) -> None:
    tier, seconds = _budget(None, samples, Settings())
    assert tier.value == tier_for(samples)
    assert seconds == Settings().tier_seconds(tier.value)


def test_tiers_default_to_2_5_16_device_hours_and_are_configurable() -> None:
    assert [Settings().tier_seconds(t) for t in TIERS] == [7200, 18000, 57600]
    assert Settings(tier_low_seconds=60).tier_seconds("low") == 60


def test_a_budget_is_seconds_or_epochs() -> None:
    with pytest.raises(ValueError):
        Budget()
    with pytest.raises(ValueError):
        Budget(seconds=10, epochs=3)
    with pytest.raises(ValueError):
        Schedule(search=0.5, final=0.5, delivery=0.5)


def test_time_budget_accounting_with_an_injected_clock() -> None:
    now = [100.0]
    budget = Budget(seconds=50, clock=lambda: now[0])
    now[0] += 20
    assert budget.used() == pytest.approx(0.4)
    assert budget.left(budget.search_end()) == pytest.approx(5.0)  # search: 50 % of 50 s
    now[0] += 10
    assert budget.left(budget.search_end()) == 0.0 and budget.left(budget.final_end()) == pytest.approx(7.5)
    assert budget.left(budget.fine_end()) == pytest.approx(15.0)  # fine synthesis: the next 15 %; delivery and
    assert not budget.too_short_for(19.9) and budget.too_short_for(20.1)  # the explanations 5 % each


def test_epoch_budget_accounting() -> None:
    budget = Budget(epochs=20)
    assert budget.reproducible and budget.epochs_left(budget.search_end()) == 10
    budget.spend_epochs(8)
    assert budget.epochs_left(budget.search_end()) == 2 and budget.used() == 0.4
    assert budget.epochs_left(budget.final_end()) == 7 and budget.epochs_left(budget.fine_end()) == 10


def test_the_stages_end_in_order_and_leave_delivery_and_the_reports_their_shares() -> None:
    budget = Budget(epochs=100)
    assert budget.search_end() < budget.final_end() < budget.fine_end() == pytest.approx(0.9)
    assert budget.shares.delivery == budget.shares.explain == 0.05


def test_an_unscheduled_budget_gets_the_default_until_the_engine_chooses() -> None:
    budget = Budget(epochs=10)
    assert budget.schedule is None and budget.search_end() == Schedule().search
    assert Schedule.for_task("text", 5_000, 5_000) == Schedule()
    large = Schedule.for_task("text", 60_000, 10_000)
    assert large.final > Schedule().final and large.search < Schedule().search  # full-data epochs cost more
    images = Schedule.for_task("image", 5_000, 5_000)  # a time budget: most of it trains the network that ships
    assert images == Schedule.for_task("image", 60_000, 10_000) and images.final > large.final
    assert Schedule.for_task("image", 5_000, 5_000, timed=False) == Schedule()  # epochs: the seeds compared


def test_the_stage_clock_says_where_every_second_went() -> None:
    now = [100.0]
    budget = Budget(seconds=50, clock=lambda: now[0])
    clock = StageClock(budget)
    for stage, seconds in zip(STAGES, (10.0, 30.0, 4.0, 1.0, 2.0), strict=True):
        now[0] += seconds
        clock.lap(stage)
    spent = clock.spent(shipped_training_s=36.0)
    assert [spent[f"{s}_s"] for s in STAGES] == [10.0, 30.0, 4.0, 1.0, 2.0] and spent["total_s"] == 47.0
    assert spent["budget_s"] == 50 and spent["shipped_network_training_share"] == 0.72
    assert StageClock(Budget(epochs=3)).spent(5.0)["shipped_network_training_share"] is None


@given(st.lists(st.integers(0, 4), min_size=30, max_size=300), st.integers(1, 320), st.integers(0, 5))
def test_a_stratified_sample_keeps_every_class_and_its_proportion(labels: list[int], rows: int, seed: int) -> None:
    y = np.asarray(labels)
    picked = stratified_sample(y, rows, seed)
    assert np.array_equal(picked, np.unique(picked))  # sorted, no row twice
    if rows >= len(y):
        assert len(picked) == len(y)
        return
    assert set(y[picked]) == set(y)
    assert abs(len(picked) - rows) <= len(set(labels))  # rounding, and at least one row per class
    for cls in set(labels):
        share = np.mean(y == cls)
        assert abs(np.sum(y[picked] == cls) - share * rows) <= 1


@given(st.lists(st.integers(0, 4), min_size=30, max_size=200), st.integers(0, 10))
def test_split_is_stratified_disjoint_and_complete(labels: list[int], seed: int) -> None:
    y = np.asarray(labels)
    split = stratified_split(y, seed)
    parts = np.concatenate([split.train, split.val, split.test])
    assert sorted(parts.tolist()) == list(range(len(y)))
    assert set(y[split.train]) == set(y)  # every class keeps training rows


@given(st.lists(st.integers(0, 30), min_size=40, max_size=200), st.integers(0, 10))
def test_duplicates_never_straddle_the_split(groups: list[int], seed: int) -> None:
    g = np.asarray(groups)
    y = g % 3  # a duplicate group has one label
    split = stratified_split(y, seed, groups=g)
    sides = [set(g[split.train]), set(g[split.val]), set(g[split.test])]
    assert not (sides[0] & sides[1]) and not (sides[0] & sides[2]) and not (sides[1] & sides[2])
    assert sorted(np.concatenate([split.train, split.val, split.test]).tolist()) == list(range(len(g)))


def test_split_depends_on_the_seed_only() -> None:
    y = np.arange(300) % 3
    a, b, c = stratified_split(y, 1), stratified_split(y, 1), stratified_split(y, 2)
    assert np.array_equal(a.test, b.test) and not np.array_equal(a.test, c.test)


def test_pareto_front() -> None:
    points = [{"accuracy": 0.9, "params": 100, "latency_ms": 1.0},
              {"accuracy": 0.95, "params": 1000, "latency_ms": 2.0},
              {"accuracy": 0.85, "params": 200, "latency_ms": 1.5},  # dominated by the first
              {"accuracy": 0.9, "params": 100, "latency_ms": 1.0}]  # a duplicate of the first stays
    assert dominates(points[0], points[2]) and not dominates(points[0], points[3])
    assert pareto_front(points) == [0, 1, 3]


def test_pace_sizes_epochs_to_the_time_left() -> None:
    pace = Pace()
    assert pace.epochs_within(10.0, 1_000, 100, most=24) == 24  # nothing measured yet
    pace.record(1_000, 100, 10, TrialResult(step_s=0.01, compile_s=2.0))  # 10 steps an epoch: 0.1 s
    assert pace.epoch_seconds(1_000, 100) == pytest.approx(0.1)
    assert pace.epochs_within(4.3, 1_000, 100, most=24) == 17  # 0.85 * (4.3 - 2) / 1.15 / 0.1
    assert pace.epochs_within(4.4, 1_000, 100, most=24, margin=0.95) == 19  # the final training's margin (0.85: 17)
    assert pace.epochs_within(1.0, 1_000, 100, most=24) == 1
    assert pace.epochs_within(4.3, 2_000, 100, most=24) == 8  # twice the work per sample
    # a network's own measured step time beats the median rate of others (here 4x faster per multiply-add)
    own = TrialResult(step_s=0.0025, compile_s=2.0)
    assert pace.epochs_within(4.3, 1_000, 100, most=100, measured=own, batch_size=10) == 68
    assert pace.epochs_within(4.3, 1_000, 100, most=100, measured=TrialResult(), batch_size=10) == 17  # unmeasured
    # ... and so does its own compilation: here 0.3 s instead of the others' median of 2 s
    own = TrialResult(step_s=0.01, compile_s=0.3)
    assert pace.epochs_within(4.3, 1_000, 100, most=100, measured=own, batch_size=10) == 29  # 0.85 * 4.0 / 1.15 / 0.1


def test_a_shortfall_names_what_is_left_and_what_is_needed_in_the_budgets_unit() -> None:
    from synthesis.budget import Budget

    epochs = Budget(epochs=10)
    epochs.spend_epochs(6)  # 10 * 0.75 = 7 until the final training ends: 1 left
    assert epochs.shortfall(1, 1e9, epochs.final_end()) is None  # seconds do not count under an epoch budget
    assert epochs.shortfall(2, 0.0, epochs.final_end()) == "what is left (1 epochs) is less than the 2 epochs needed"
    now = [0.0]
    seconds = Budget(seconds=200, clock=lambda: now[0])
    now[0] = 100.0
    assert seconds.shortfall(10**6, 49.0, 0.75) is None  # 150 - 100 = 50 s left
    short = seconds.shortfall(0, 51.0, 0.75)
    assert short is not None and "50.0 s" in short and "about 51.0 s" in short
