"""Each compression stage does what it claims: at most N inputs per neuron, at most k values per layer, outputs
kept at every hand-over, the redundant units found and removed."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

from core import tree
from core.data import Dataset
from core.reparam import Reparam, quantise
from core.spec import Spec
from core.surgery import remove_units_many, zero_units
from synthesis.budget import Budget
from synthesis.compress import connections, stages
from synthesis.compress.buckets import FIRST_K, choose_buckets, k_choices, shareable
from synthesis.compress.choose import milder, per_layer
from synthesis.compress.connections import prunable, prune_round, top_n
from synthesis.compress.context import Context, Options, State
from synthesis.compress.filters import ranking, select_filters, selectable
from synthesis.compress.importance import unit_importance
from synthesis.compress.reinit import ReinitError, compressed_start, verify_same_outputs
from synthesis.compress.retrain import retrain
from tests.synthesis.compress_setup import CONFIG, Recorder, context, digits, mlp, start, trained


def test_per_layer_takes_each_layers_furthest_passing_setting_then_backs_off_together() -> None:
    grids = {"a": list(range(8)), "b": list(range(8))}
    def score(choice: Mapping[str, int]) -> float:
        return 1.0 - 0.1 * choice.get("a", 0) - 0.05 * choice.get("b", 0)

    chosen = per_layer(grids, score, floor=0.7, stop=lambda: False)
    # alone: a may go to 3 (0.7), b to 6 (0.7); together they back off until 1 - 0.1 a - 0.05 b >= 0.7
    assert score(chosen) >= 0.7
    assert chosen == {"a": 1, "b": 4}
    assert per_layer(grids, score, floor=0.7, stop=lambda: True) == {"a": 0, "b": 0}


def test_after_pruning_every_neuron_has_at_most_n_nonzero_inputs() -> None:
    recorder = Recorder()
    ctx = context(monitor=recorder)
    pruned = prune_round(ctx, start(ctx), slack=0.05)
    assert pruned is not None
    (incoming,) = [p["incoming"] for kind, p in recorder.events if kind == "compress_prune"]
    params = tree.flatten(pruned.variables["params"])
    assert incoming and any(n < params[p].shape[0] for p, n in incoming.items())
    for path, n in incoming.items():
        assert int((np.asarray(params[path]) != 0).sum(axis=0).max()) <= n
        np.testing.assert_array_equal(np.asarray(pruned.reparam.masks[path]) != 0, np.asarray(params[path]) != 0)
    retrained = retrain(ctx, pruned, 0.5, "test")  # training holds the masks
    for path, n in incoming.items():
        kernel = np.asarray(tree.flatten(retrained.variables["params"])[path])
        assert int((kernel != 0).sum(axis=0).max()) <= n


def test_the_pruning_grid_steps_down_gently_to_one_input() -> None:
    for current in range(1, 1100):
        g = connections.grid(current)
        assert g[0] == current and g[-1] == 1 and g == sorted(set(g), reverse=True)
        for bigger, smaller in itertools.pairwise(g):  # steps keep over 80 % of the inputs (less when rounded)
            assert smaller >= (0.8 * bigger if bigger >= 50 else min(bigger - 1, 0.75 * bigger))
    assert connections.grid(288)[:4] == [288, 243, 204, 172]


def test_each_round_is_reported_and_a_missed_one_halves_the_slack_of_the_next() -> None:
    recorder = Recorder()
    ctx = context(epochs=12, monitor=recorder)
    state = start(ctx)
    floors = iter([2.0, 0.0, 0.0, 2.0, 0.0])  # 2.0: no network can keep it; 0.0: every network does

    def choose(c: Context, s: State, slack: float) -> State:
        c.floor = next(floors)
        return s

    stages._rounds(ctx, state, "test", 0.1, 0.5, choose, 5, False)
    rounds = [p for kind, p in recorder.events if kind == "compress_round"]
    assert [p["kept"] for p in rounds] == [False, True, True, False, True]
    assert [p["slack"] for p in rounds] == pytest.approx([0.1, 0.05, 0.05, 0.05, 0.025])
    assert [p["floor"] for p in rounds] == [2.0, 0.0, 0.0, 2.0, 0.0]


def test_milder_keeps_only_the_settings_before_a_rejected_choice() -> None:
    grids = {"a": [0, 1, 2, 3], "b": [10, 8, 6], "c": [5, 4]}
    assert milder(grids, None) == {"a": [0, 1, 2, 3], "b": [10, 8, 6], "c": [5, 4]}
    # a: changed to 2, so 0-1 remain; b: rejected unchanged, so stays unchanged; c: not in the choice, unchanged
    assert milder(grids, {"a": 2, "b": 10}) == {"a": [0, 1], "b": [10], "c": [5]}
    assert milder(grids, {"a": 1, "b": 6, "c": 4}) == {"a": [0], "b": [10, 8], "c": [5]}


def test_a_round_that_missed_is_retried_with_settings_milder_than_its_own() -> None:
    """After a miss the next try may only step back from what missed; a kept round lifts the restriction."""
    ctx = context(epochs=12)
    state = start(ctx)
    proposals, seen = iter([{"x": 3}, {"x": 2}, {"x": 5}]), []
    floors = iter([2.0, 0.0, 0.0])  # 2.0: no network keeps it; 0.0: every network does

    def choose(c: Context, s: State, slack: float) -> State:
        seen.append(c.rejected)
        c.proposed, c.floor = next(proposals), next(floors)
        return s

    stages._rounds(ctx, state, "test", 0.1, 0.5, choose, 3, False)
    assert seen == [None, {"x": 3}, None]


def test_pruning_and_bucketing_retries_step_back_from_the_choice_that_missed() -> None:
    ctx = context()
    state = start(ctx)
    pruned = prune_round(ctx, state, slack=0.05)
    assert pruned is not None
    first = dict(ctx.proposed)
    ctx.rejected = first
    again = prune_round(ctx, state, slack=0.05)
    for path, n in ctx.proposed.items():  # fewer pruned where the miss pruned, none elsewhere
        full = connections.grid(connections.incoming(np.ones(tree.flatten(state.variables["params"])[path].shape),
                                                     path))[0]
        assert n > first[path] if first[path] != full else n == full
    assert again is None or again.reparam.masks
    ctx.rejected = None
    assert choose_buckets(ctx, state, slack=1.0) is not None and set(ctx.proposed.values()) == {FIRST_K}
    ctx.rejected = dict(ctx.proposed)
    gentler = choose_buckets(ctx, state, slack=1.0)
    assert gentler is not None and min(gentler.reparam.sizes.values()) > FIRST_K


def test_top_n_keeps_the_largest_inputs_of_each_neuron() -> None:
    w = np.array([[1.0, -5.0], [-3.0, 0.5], [2.0, 4.0]], np.float32)
    np.testing.assert_array_equal(top_n(w, 2, "h/kernel"), [[0, 1], [1, 0], [1, 1]])
    qkv = np.arange(24, dtype=np.float32).reshape(4, 2, 3)  # attention: (inputs, heads, head dim)
    assert top_n(qkv, 1, "att/query/kernel").sum(axis=0).tolist() == [[1, 1, 1], [1, 1, 1]]


def test_bucketing_leaves_at_most_k_distinct_values_per_layer_through_training() -> None:
    ctx = context()
    state = start(ctx)
    shared = choose_buckets(ctx, state, slack=0.02)
    assert shared is not None and shared.reparam.sizes
    for variables in (shared.variables, retrain(ctx, shared, 0.5, "test").variables):
        params = tree.flatten(variables["params"])
        for path, k in shared.reparam.sizes.items():
            assert 2 <= k <= 256
            assert len(np.unique(np.asarray(params[path]))) <= k


def test_a_second_bucketing_round_shares_among_fewer_values_and_keeps_the_other_leaves_shared() -> None:
    ctx = context()
    state = start(ctx)
    params = tree.flatten(state.variables["params"])
    reparam = Reparam({}, {p: quantise(params[p], 64)[1] for p in ("h/kernel", "logits/kernel")},
                      {"h/kernel": 64, "logits/kernel": 64})
    shared = ctx.state(state.spec, {**state.variables, "params": compressed_start(state.variables["params"], reparam)},
                       reparam)
    again = choose_buckets(ctx, shared, slack=0.02)
    assert again is not None
    assert {"h/kernel", "logits/kernel"} <= set(again.reparam.sizes)
    assert all(k <= 64 for k in again.reparam.sizes.values()) and min(again.reparam.sizes.values()) < 64
    flat = tree.flatten(again.variables["params"])
    for path, k in again.reparam.sizes.items():
        assert len(np.unique(np.asarray(flat[path]))) <= k
    every = ("h/kernel", "logits/kernel", "h/bias")
    low = Reparam({}, {p: quantise(params[p], 2)[1] for p in every}, dict.fromkeys(every, 2))
    at_two = ctx.state(state.spec, {**state.variables, "params": compressed_start(state.variables["params"], low)},
                       low)
    assert choose_buckets(ctx, at_two, slack=1.0) is None  # no leaf can share fewer than 2 values


def test_bucketing_comes_down_to_fewer_values_gradually() -> None:
    assert k_choices(None, 10_000) == [256, 128, 64, 32, 16]
    assert k_choices(16, 10_000) == [8, 4] and k_choices(4, 10_000) == [2] and k_choices(2, 10_000) == []
    assert k_choices(None, 36) == [16]  # 32 values in 36 entries would not be smaller than the values themselves
    ctx = context()
    state = start(ctx)
    seen = []
    for _ in range(3):  # any accuracy passes: every leaf takes the fewest values it may
        fewer = choose_buckets(ctx, state, slack=1.0)
        assert fewer is not None
        state = fewer
        seen.append(dict(state.reparam.sizes))
    assert [k["h/kernel"] for k in seen] == [FIRST_K, 4, 2]
    assert all(len(set(k.values())) == 1 for k in seen)
    assert choose_buckets(ctx, state, slack=1.0) is None


def test_biases_of_32_or_more_entries_are_shared_too_and_smaller_ones_stay_float32() -> None:
    ctx = context()
    state = start(ctx)
    params = tree.flatten(state.variables["params"])
    assert shareable(state.spec, params) == ["h/kernel", "logits/kernel", "h/bias"]  # logits/bias has 10 entries
    shared = choose_buckets(ctx, state, slack=1.0)  # any accuracy passes: every shareable leaf gets the least k
    assert shared is not None and "h/bias" in shared.reparam.sizes and "logits/bias" not in shared.reparam.sizes
    flat = tree.flatten(shared.variables["params"])
    assert len(np.unique(np.asarray(flat["h/bias"]))) <= shared.reparam.sizes["h/bias"] < 32
    assert np.asarray(flat["logits/bias"]).tobytes() == np.asarray(params["logits/bias"]).tobytes()


def test_reinitialisation_keeps_the_outputs_and_a_change_is_caught() -> None:
    ctx = context()
    spec, variables = trained()
    params = tree.flatten(variables["params"])
    mask = jnp.asarray(top_n(params["h/kernel"], 10, "h/kernel"))
    reparam = Reparam({"h/kernel": mask}, {"logits/kernel": quantise(params["logits/kernel"], 8)[1]},
                      {"logits/kernel": 8})
    begun = {**variables, "params": compressed_start(variables["params"], reparam)}
    again = {**variables, "params": compressed_start(begun["params"], reparam)}
    assert verify_same_outputs(ctx, (spec, begun), (spec, again)) <= 1e-6
    zeroed = zero_units(spec, variables, "h", [0, 5, 9])
    smaller = remove_units_many(spec, zeroed, {"h": [u for u in range(32) if u not in (0, 5, 9)]})
    verify_same_outputs(ctx, (spec, zeroed), smaller)
    with pytest.raises(ReinitError):
        verify_same_outputs(ctx, (spec, variables), (spec, zeroed))


def widened(redundant: list[int]) -> tuple[Spec, dict[str, Any]]:
    """The trained MLP with extra hidden units at ``redundant``: half never fire, half feed nothing."""
    _spec, variables = trained()
    p = tree.flatten(variables["params"])
    rng = np.random.default_rng(5)
    width = 32 + len(redundant)
    useful = [u for u in range(width) if u not in redundant]
    kernel, bias, out = (np.zeros((64, width), np.float32), np.zeros(width, np.float32),
                         np.zeros((width, 10), np.float32))
    kernel[:, useful], bias[useful], out[useful] = p["h/kernel"], p["h/bias"], p["logits/kernel"]
    for i, u in enumerate(redundant):
        kernel[:, u] = rng.normal(0, 0.3, 64)
        if i % 2:  # dead: inputs are non-negative pixels, so a negative kernel and bias never fire
            kernel[:, u], bias[u] = -np.abs(kernel[:, u]), -1.0
            out[u] = rng.normal(0, 0.5, 10)
    params = {"h": {"kernel": jnp.asarray(kernel), "bias": jnp.asarray(bias)},
              "logits": {"kernel": jnp.asarray(out), "bias": p["logits/bias"]}}
    return mlp(width), {"params": params}


def test_the_redundant_units_are_ranked_last_and_removed() -> None:
    redundant = [2, 9, 13, 20, 27, 31, 35, 38]
    spec, variables = widened(redundant)
    ctx = context()
    state = start(ctx, spec, variables)
    importance = unit_importance(ctx, state.spec, state.variables, ["h"], "taylor")["h"]
    useful = np.delete(importance, redundant)
    assert np.all(importance[redundant] == 0.0) and np.all(importance[redundant] <= useful.min())
    order = ranking(ctx, state)["h"].tolist()
    zero = int(np.sum(importance == 0.0))  # units of the trained network that never fire count as redundant too
    assert set(redundant) <= set(order[:zero])
    smaller, removed = select_filters(ctx, state, slack=0.0)
    # only redundant units go (ours, or ones training left dead), at least as many as we added
    assert len(removed["h"]) >= len(redundant) and np.all(importance[removed["h"]] == 0.0)
    assert smaller.accuracy >= state.accuracy


def test_the_probe_floor_scales_the_slack_by_the_error_of_always_predicting_the_commonest_class() -> None:
    spec, variables = trained()
    ctx = context()
    room = 1.0 - np.bincount(ctx.y_probe).max() / len(ctx.y_probe)
    assert 0.85 < room < 0.95  # ten digits, about equally common
    accuracy = ctx.probe_accuracy(spec, variables)
    assert ctx.probe_floor(spec, variables, 0.1) == pytest.approx(accuracy - 0.1 * room)
    d = digits()
    threes = Dataset(d.x_train, (d.y_train == 3).astype(np.int32), d.x_val, (d.y_val == 3).astype(np.int32))
    rare = Context(threes, Budget(epochs=2), Options(), CONFIG, Recorder())
    rare_room = 1.0 - np.bincount(rare.y_probe).max() / len(rare.y_probe)
    assert rare_room < 0.15  # one class in ten: 10 points of slack would allow a constant prediction
    accuracy = rare.probe_accuracy(spec, variables)
    assert rare.probe_floor(spec, variables, 0.1) == pytest.approx(accuracy - 0.1 * rare_room)


def test_connection_pruning_leaves_a_layer_with_a_negligible_share_of_the_weights_dense(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A thin layer costs next to nothing in the artifact, and pruning it hurts most: it is not pruned."""
    spec, variables = trained()  # h: 64 x 32 = 2,048 weights; logits: 32 x 10 = 320 (13.5 %)
    params = tree.flatten(variables["params"])
    assert prunable(spec, params) == ["h/kernel", "logits/kernel"]
    monkeypatch.setattr(connections, "MIN_SHARE", 0.2)
    assert prunable(spec, params) == ["h/kernel"]
    ctx = context()
    pruned = prune_round(ctx, start(ctx), slack=0.05)
    assert pruned is not None and set(pruned.reparam.masks) == {"h/kernel"}
    logits = np.asarray(tree.flatten(pruned.variables["params"])["logits/kernel"])
    assert np.count_nonzero(logits) == logits.size


def test_filter_selection_leaves_the_units_of_a_node_with_a_negligible_share_of_the_weights(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Removing a thin layer's units saves next to no bytes: its units are not candidates."""
    redundant = [2, 9, 13, 20]
    spec, variables = widened(redundant)  # h: 64 x 36 = 2,304 weights (86.5 %); logits: 36 x 10
    params = tree.flatten(variables["params"])
    assert selectable(spec, params) == ["h"]
    ctx = context()
    state = start(ctx, spec, variables)
    assert select_filters(ctx, state, slack=0.0)[1]  # the redundant units go...
    monkeypatch.setattr(connections, "MIN_SHARE", 0.9)
    assert selectable(spec, params) == [] and ranking(ctx, state) == {}
    smaller, removed = select_filters(ctx, state, slack=0.0)  # ...unless h is thin
    assert removed == {} and smaller is state
