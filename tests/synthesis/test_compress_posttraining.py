"""Weight sharing without retraining (and with a short retraining after it): per-layer k from the quantisation
error, one bound chosen on validation, the tolerance held, and a network that ships when no stage can retrain."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

from core import artifact, tree
from core.reparam import Reparam, host_start, materialise, quantise, shared_leaf, trainable
from synthesis.budget import Budget
from synthesis.compress import Options, compress, pipeline, posttraining
from synthesis.compress.context import Context, State
from synthesis.compress.posttraining import (
    BOUNDS,
    STEP,
    LeafOptions,
    Sharing,
    first_round,
    share_and_retrain,
    share_without_retraining,
)
from synthesis.compress.retrain import retrain
from tests.synthesis.compress_setup import CONFIG, Recorder, context, digits, start, trained


def test_a_leaf_is_shared_among_fewer_values_as_the_error_bound_grows() -> None:
    leaf = np.random.default_rng(0).normal(size=(64, 48)).astype(np.float32)
    options = LeafOptions(leaf, None)
    errors = [options.option(k)[3] for k in options.ks]
    assert options.ks == sorted(options.ks, reverse=True) and errors == sorted(errors)
    assert options.fewest_within(0.0) is None  # no sharing is exact on normal weights
    ks = [o[0] for o in (options.fewest_within(b) for b in BOUNDS) if o is not None]
    assert ks and ks == sorted(ks, reverse=True) and ks[-1] < ks[0]
    for k, idx, dense, error in (options.fewest_within(b) for b in BOUNDS[-1:]):  # type: ignore[misc]
        assert len(np.unique(np.asarray(dense))) <= k
        np.testing.assert_array_equal(np.asarray(idx), np.asarray(quantise(leaf, k)[1]))
        exact = np.sum((np.asarray(dense, np.float64) - leaf) ** 2) / np.sum(leaf.astype(np.float64) ** 2)
        assert error == pytest.approx(exact, rel=1e-3)  # centroids against bucket means: equal once converged


def test_the_host_start_is_what_training_under_the_reparam_starts_from() -> None:
    rng = np.random.default_rng(1)
    leaf = rng.normal(size=(30, 20)).astype(np.float32)
    mask = (rng.random(leaf.shape) > 0.4).astype(np.float32)
    for k, m in ((8, None), (4, mask)):
        idx, dense = shared_leaf(leaf, k, m)
        one = Reparam({"w": jnp.asarray(m)} if m is not None else {}, {"w": idx}, {"w": k})
        reference = np.asarray(materialise(trainable({"w": leaf}, one), one)["w"])
        np.testing.assert_allclose(np.asarray(dense), reference, atol=1e-6)
        np.testing.assert_allclose(host_start({"w": leaf}, one)["w"], reference, atol=1e-6)
        if m is not None:
            assert np.all(np.asarray(dense)[m == 0] == 0)


def test_sharing_without_retraining_keeps_the_tolerance_and_shrinks_the_artifact() -> None:
    recorder = Recorder()
    ctx = context(monitor=recorder)
    state = start(ctx)
    ctx.floor = state.accuracy - 0.01
    shared, i = share_without_retraining(ctx, Sharing(ctx, state))
    assert i >= 0 and shared.accuracy >= ctx.floor
    assert shared.reparam.sizes and all(k < 256 for k in shared.reparam.sizes.values())
    assert len(ctx.packed(shared)) < len(ctx.packed(state)) / 3
    decoded = artifact.decode(ctx.packed(shared))
    for path, leaf in tree.flatten(shared.variables["params"]).items():
        assert np.asarray(leaf, np.float32).tobytes() == tree.flatten(decoded.variables["params"])[path].tobytes()
    rounds = [p for kind, p in recorder.events if kind == "compress_round" and p["stage"] == "shared"]
    assert rounds and any(r["kept"] for r in rounds)
    assert all(r["val_accuracy"] < ctx.floor for r in rounds if not r["kept"] and r["val_loss"] <= (ctx.ceiling
                                                                                                       or np.inf))
    ctx.floor = 1.01  # nothing can keep it: the network comes back unshared
    assert share_without_retraining(ctx, Sharing(ctx, state)) == (state, -1)


def test_many_validation_rows_are_screened_on_a_few_and_the_bound_found_is_confirmed_on_all(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context()
    state = start(ctx)
    ctx.floor = state.accuracy - 0.01
    everything = share_without_retraining(ctx, Sharing(ctx, state))
    monkeypatch.setattr(posttraining, "SCREEN_ROWS", len(ctx.data.y_val) // 8)
    measured: list[int] = []
    sharing = Sharing(ctx, state)
    at = sharing.at

    def measuring(i: int) -> State | None:
        measured.append(i)
        return at(i)

    monkeypatch.setattr(sharing, "at", measuring)
    screened, i = share_without_retraining(ctx, sharing)
    assert ctx.within(screened) and screened.accuracy >= ctx.floor  # on every validation row
    assert measured and min(measured) >= i  # the bisection's milder bounds were screened, not measured on all rows
    assert i <= everything[1] + 1 and (i >= 0) == (everything[1] >= 0)
    ctx.floor = 1.01
    assert share_without_retraining(ctx, Sharing(ctx, state)) == (state, -1)


def test_retraining_a_sharing_goes_beyond_what_holds_without_it() -> None:
    recorder = Recorder()
    ctx = context(epochs=6, monitor=recorder)
    state = start(ctx)
    ctx.floor = state.accuracy - 0.01
    sharing = Sharing(ctx, state)
    shared, i = share_without_retraining(ctx, sharing)
    ctx.until = 1.0
    retrained = share_and_retrain(ctx, sharing, i, 1.0)
    tries = [p for kind, p in recorder.events if kind == "compress_round" and p["stage"] == "shared-retrained"]
    assert tries and ctx.budget.epochs_used >= 1
    if retrained is not None:  # kept: fewer values than without retraining, still within the tolerance
        assert retrained.accuracy >= ctx.floor and any(t["kept"] for t in tries)
        assert sum(retrained.reparam.sizes.values()) < sum(shared.reparam.sizes.values())
    else:
        assert not any(t["kept"] for t in tries)
    bounds = [t["bound"] for t in tries]  # two bounds beyond the last kept one; after a miss, halfway back
    assert bounds[0] == BOUNDS[i + STEP] and (len(bounds) == 1 or tries[0]["kept"]
                                              or bounds[1] == BOUNDS[i + STEP // 2])


def test_a_retrained_round_measures_only_the_network_its_retraining_ends_with(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared network a round starts from is not measured on the validation rows (the retraining measures what
    it ends with): measuring it cost a 120 s MNIST job 1.4 s of its 12 s of compression."""
    recorder = Recorder()
    ctx = context(epochs=6, monitor=recorder)
    state = start(ctx)
    sharing = Sharing(ctx, state)
    measured = ctx.state
    calls: list[int] = []

    def counted(*args: Any) -> State:
        calls.append(1)
        return measured(*args)

    monkeypatch.setattr(ctx, "state", counted)
    ctx.until = 1.0
    share_and_retrain(ctx, sharing, 0, 1.0)
    rounds = [p for kind, p in recorder.events if kind == "compress_round" and p["stage"] == "shared-retrained"]
    assert rounds and len(calls) == len(rounds)


def test_a_miss_that_ends_the_stage_still_gets_its_halfway_round(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    ctx = Context(digits(), Budget(seconds=600.0), Options(), CONFIG, recorder)
    state = start(ctx)
    sharing = Sharing(ctx, state)
    calls: list[float] = []

    def first_misses_and_ends_the_stage(c: Context, *args: Any, **kwargs: Any) -> State:
        trained = retrain(c, *args, **kwargs)
        calls.append(c.until)
        c.floor = 2.0 if len(calls) == 1 else 0.0  # the first round misses, the halfway one is kept
        c.until = c.budget.used() if len(calls) == 1 else c.until  # the first round spent the stage's share
        return trained

    monkeypatch.setattr(posttraining, "retrain", first_misses_and_ends_the_stage)
    ctx.until = 0.5
    kept = share_and_retrain(ctx, sharing, 0, 1.0)
    tries = [p for kind, p in recorder.events if kind == "compress_round" and p["stage"] == "shared-retrained"]
    assert [t["bound"] for t in tries[:2]] == [BOUNDS[STEP], BOUNDS[STEP // 2]]
    assert [t["kept"] for t in tries[:2]] == [False, True]  # (later rounds may use what the halfway one left)
    assert kept is not None and ctx.budget.used() <= 1.0


def test_with_no_stage_able_to_retrain_a_shared_network_still_ships() -> None:
    spec, variables = trained()
    data = digits()
    off = Options(filters=False, connections=False, buckets=False, post_training=False)
    plain = compress(spec, variables, data, tolerance=0.01, epochs=1, config=CONFIG, options=off)
    shared = compress(spec, variables, data, tolerance=0.01, epochs=1, config=CONFIG,
                      options=Options(filters=False, connections=False, buckets=False))
    assert plain.ratio < 1.5 < 3 < shared.ratio
    assert shared.figures["val_accuracy_after"] >= shared.figures["val_accuracy_before"] - 0.01
    assert shared.figures["bits"]


class Ticking(Recorder):
    """A monitor whose every progress call moves a fake clock ``step`` seconds on (scoring a network does)."""

    def __init__(self, now: list[float], step: float) -> None:
        super().__init__()
        self.now, self.step = now, step

    def progress(self, fraction: float, metrics: Mapping[str, float]) -> None:
        self.now[0] += self.step
        super().progress(fraction, metrics)


@pytest.mark.parametrize(("step", "stages_run"), [(6.0, False), (0.05, True)])
def test_a_time_budget_runs_the_stages_only_with_room_for_them(step: float, stages_run: bool) -> None:
    """Scoring a network costs ``step`` of a 100 s budget: at 6 s the sharing pass takes about a quarter of it and
    the stages' per-layer searches would not reach their retraining, so all the time goes to sharing with
    retraining; at 0.05 s the stages follow it."""
    spec, variables = trained()
    now = [0.0]
    recorder = Ticking(now, step)
    c = compress(spec, variables, digits(), tolerance=0.01, seconds=100.0, seed=1, monitor=recorder,
                 options=Options(prune_rounds=1, max_epochs=2), config=CONFIG, clock=lambda: now[0])
    kinds = {kind for kind, _ in recorder.events}
    stages = {"compress_filters", "compress_prune", "compress_buckets"}
    assert bool(kinds & stages) is stages_run
    retrained = [p for kind, p in recorder.events if kind == "compress_round" and p["stage"] == "shared-retrained"]
    assert retrained  # a time budget retrains a sharing first, whether the stages follow or not
    assert c.figures["val_accuracy_after"] >= c.figures["val_accuracy_before"] - 0.01 and c.ratio > 3


def test_waiting_for_the_warm_up_is_not_taken_for_the_sharing_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """As above at 0.05 s per score, with the retraining's compilation (:func:`retrain.warm_up`) taking 20 s past
    the sharing pass: the pass still takes a small part of the budget, so the stages follow retrained sharing."""
    spec, variables = trained()
    now = [0.0]

    def slow_compilation(*args: Any) -> Callable[[], None]:
        def wait() -> None:
            now[0] += 20.0
        return wait

    monkeypatch.setattr(pipeline, "warm_up", slow_compilation)
    recorder = Ticking(now, 0.05)
    compress(spec, variables, digits(), tolerance=0.01, seconds=100.0, seed=1, monitor=recorder,
             options=Options(prune_rounds=1, max_epochs=2), config=CONFIG, clock=lambda: now[0])
    assert {kind for kind, _ in recorder.events} & {"compress_filters", "compress_prune", "compress_buckets"}


def test_with_sharing_held_to_the_largest_bound_a_hurried_budget_goes_to_the_stages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As above at 6 s per score, but sharing without retraining held to the largest bound: no retrained sharing
    is left to try, so the stages get the time instead of nothing."""
    real = posttraining.share_without_retraining

    def to_the_top(ctx: Context, sharing: Sharing) -> tuple[State, int]:
        return real(ctx, sharing)[0], len(BOUNDS) - 1

    monkeypatch.setattr(pipeline, "share_without_retraining", to_the_top)
    spec, variables = trained()
    now = [0.0]
    recorder = Ticking(now, 6.0)
    compress(spec, variables, digits(), tolerance=0.01, seconds=100.0, seed=1, monitor=recorder,
             options=Options(prune_rounds=1, max_epochs=2), config=CONFIG, clock=lambda: now[0])
    kinds = {kind for kind, _ in recorder.events}
    assert kinds & {"compress_filters", "compress_prune", "compress_buckets"}
    assert not [p for kind, p in recorder.events if kind == "compress_round" and p["stage"] == "shared-retrained"]


def test_retrained_sharing_starts_a_step_beyond_the_bound_that_held_or_at_the_largest() -> None:
    last = len(BOUNDS) - 1
    assert [first_round(i) for i in (-1, 0, last - STEP, last - 3, last)] == [STEP - 1, STEP, last, last,
                                                                            len(BOUNDS)]
