"""Embedding tables are pruned by whole rows (tokens): the rows that go are the ones training inputs do not need,
the hand-over keeps the outputs, and the artifact stores the row mask in about a bit per row."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from core import artifact, tree
from core.data import Dataset
from core.model import build
from core.reparam import Reparam
from core.spec import Spec
from core.train_config import TrainConfig
from core.training import train
from synthesis.budget import Budget
from synthesis.compress.connections import prune_round, top_rows
from synthesis.compress.context import Context, Options
from synthesis.compress.importance import row_importance
from tests.synthesis.compress_setup import Recorder

VOCAB, LENGTH = 64, 8
SIGNAL = [2, 3, 4, 5]
"""Tokens that say "class 1"; the other used tokens are noise, and tokens 48 and up never occur."""
UNSEEN = range(48, VOCAB)


def bag() -> Spec:
    return Spec.from_dict({"input": {"shape": [LENGTH], "dtype": "int32"},
                           "output": {"node": "logits", "num_classes": 2}, "nodes": [
        {"id": "embed", "op": "embedding", "inputs": ["input"], "params": {"vocab_size": VOCAB, "dim": 8}},
        {"id": "pool", "op": "global_max_pool", "inputs": ["embed"]},
        {"id": "logits", "op": "dense", "inputs": ["pool"], "params": {"units": 2}}]})


def texts(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.integers(6, 48, (n, LENGTH)).astype(np.int32)
    y = (rng.random(n) < 0.5).astype(np.int32)
    x[y == 1, 0] = rng.choice(SIGNAL, int(y.sum()))
    return np.take_along_axis(x, rng.permuted(np.tile(np.arange(LENGTH), (n, 1)), axis=1), axis=1), y


@functools.cache
def trained() -> tuple[Dataset, dict[str, Any]]:
    rng = np.random.default_rng(0)
    (xt, yt), (xv, yv) = texts(1200, rng), texts(400, rng)
    data = Dataset(xt, yt, xv, yv)
    result = train(build(bag()), data, TrainConfig(epochs=15, learning_rate=1e-2, batch_size=64, patience=None))
    return data, result.variables


def context() -> Context:
    data, _ = trained()
    return Context(data, Budget(epochs=4), Options(), TrainConfig(epochs=4, learning_rate=1e-2, batch_size=64),
                   Recorder())


def test_rows_no_training_input_uses_score_zero_and_the_signal_rows_score_highest() -> None:
    ctx = context()
    _, variables = trained()
    scores = row_importance(ctx, bag(), variables, ["embed/embedding"])["embed/embedding"]
    assert np.all(scores[list(UNSEEN)] == 0.0) and np.all(scores[:2] == 0.0)  # ids 0, 1 never occur either
    assert scores[SIGNAL].min() > np.median(scores[6:48])
    mask = np.ones((VOCAB, 8), np.float32)
    mask[SIGNAL[0]] = 0  # an already pruned row stays pruned, whatever its score
    kept = top_rows(scores, mask, len(SIGNAL))
    assert np.all(kept.sum(axis=1) % 8 == 0)  # whole rows
    assert set(np.flatnonzero(kept[:, 0])) == set(SIGNAL[1:]) | {int(np.argsort(-np.where(
        mask[:, 0] != 0, scores, -np.inf))[len(SIGNAL) - 1])}


def test_a_pruning_round_drops_unused_and_noise_rows_keeps_the_signal_and_packs_exactly() -> None:
    ctx = context()
    _, variables = trained()
    state = ctx.state(bag(), variables, Reparam())
    ctx.floor = state.accuracy - 0.005
    pruned = prune_round(ctx, state, slack=0.05)  # verifies the hand-over keeps the outputs, else raises
    assert pruned is not None
    mask = np.asarray(pruned.reparam.masks["embed/embedding"])
    rows = np.asarray(mask.any(axis=1), bool)
    assert np.all(mask[rows] == 1)  # each token keeps all of its dimensions or none
    assert rows[SIGNAL].all() and not rows[list(UNSEEN)].any() and rows.sum() < 48 - 6
    table = np.asarray(tree.flatten(pruned.variables["params"])["embed/embedding"])
    before = np.asarray(variables["params"]["embed"]["embedding"])
    assert np.all(table[~rows] == 0) and np.all(table[rows] == before[rows])
    assert pruned.accuracy >= state.accuracy - 0.05
    data = artifact.encode(pruned.spec, pruned.variables, pruned.reparam)
    decoded = tree.flatten(artifact.decode(data).variables["params"])
    assert all(np.asarray(decoded[p]).tobytes() == np.asarray(a, np.float32).tobytes()
               for p, a in tree.flatten(pruned.variables["params"]).items())
