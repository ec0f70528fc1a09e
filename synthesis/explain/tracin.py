"""TracIn: how much each training row helped or hurt a prediction, and which rows the model resists.

Pruthi et al., "Estimating Training Data Influence by Tracing Gradient Descent", NeurIPS 2020 (TracInCP): the
influence of a training row on a test input is the sum over checkpoints of the dot product of their loss gradients;
a row's self-influence (its gradient's squared norm, summed the same way) is high where the model resists its label,
the paper's test for mislabelled rows. Gradients are those of the output layers only
(`synthesis.explain.subject.output_layers`), per example by ``vmap(grad)``, as the paper's last-layer variant; the
checkpoints are weighted equally (the learning rates of the paper are left out: a schedule's last checkpoints would
count for almost nothing).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core.model import Model
from synthesis.explain.subject import Subject, output_layers

CHUNK = 256
"""Rows whose gradients are taken at once."""


@functools.partial(jax.jit, static_argnums=(0, 1))
def _per_example(model: Model, layers: tuple[str, ...], variables: dict[str, Any], x: jax.Array, y: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
    head = {k: variables["params"][k] for k in layers}

    def loss(part: dict[str, Any], xi: jax.Array, yi: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = model.apply({**variables, "params": {**variables["params"], **part}}, xi[None])[0]
        return optax.softmax_cross_entropy_with_integer_labels(logits, yi[None])[0], jnp.argmax(logits[0])

    grads, predicted = jax.vmap(jax.grad(loss, has_aux=True), in_axes=(None, 0, 0))(head, x, y)
    flat = jnp.concatenate([g.reshape(len(x), -1) for g in jax.tree.leaves(grads)], axis=1)
    return flat, predicted


def gradients(subject: Subject, x: np.ndarray, y: np.ndarray, check: Callable[[], None] | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per-example loss gradients of the output layers' parameters ``[N, P]`` (float32) and the predicted classes
    ``[N]`` (from the same forward pass), `CHUNK` rows at a time; `check` runs between chunks (it may raise)."""
    layers = tuple(output_layers(subject.graph))
    grads, predicted = [], []
    for start in range(0, len(x), CHUNK):
        if check is not None:
            check()
        g, p = _per_example(subject.model, layers, subject.variables, jnp.asarray(x[start:start + CHUNK]),
                            jnp.asarray(y[start:start + CHUNK], jnp.int32))
        grads.append(np.asarray(g))
        predicted.append(np.asarray(p))
    if not grads:
        return np.zeros((0, 0), np.float32), np.zeros(0, np.int64)
    return np.concatenate(grads), np.concatenate(predicted)


def trace(checkpoints: Sequence[Subject], x: np.ndarray, y: np.ndarray, x_test: np.ndarray | None = None,
          y_test: np.ndarray | None = None, check: Callable[[], None] | None = None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """In one pass over the rows per checkpoint: each row's self-influence ``[N]`` (its gradient's squared norm
    summed over the checkpoints), the influence ``[T, N]`` of each row on each test input's loss at its given (or
    predicted) label (positive: the row helped, a proponent; negative: it hurt, an opponent), and each row's class
    as the last checkpoint predicts it."""
    rows = len(x_test) if x_test is not None else 0
    scores, influence = np.zeros(len(x), np.float64), np.zeros((rows, len(x)), np.float64)
    predicted = np.zeros(len(x), np.int64)
    for subject in checkpoints:
        g_test = gradients(subject, x_test, y_test)[0] if x_test is not None and y_test is not None and rows else None
        for start in range(0, len(x), CHUNK * 8):
            g, p = gradients(subject, x[start:start + CHUNK * 8], y[start:start + CHUNK * 8], check)
            scores[start:start + len(g)] += np.einsum("np,np->n", g, g)
            predicted[start:start + len(g)] = p
            if g_test is not None:
                influence[:, start:start + len(g)] += g_test @ g.T
    return scores.astype(np.float32), influence.astype(np.float32), predicted


def self_influence(checkpoints: Sequence[Subject], x: np.ndarray, y: np.ndarray,
                   check: Callable[[], None] | None = None) -> np.ndarray:
    """Each row's self-influence ``[N]`` (:func:`trace` without test inputs)."""
    return trace(checkpoints, x, y, check=check)[0]


@dataclass(frozen=True)
class Suspect:
    """A row whose label the model resists: its position in the uploaded data, given and suggested label, score."""

    row: int
    given: int
    suggested: int
    score: float


def suspect_labels(scores: np.ndarray, given: np.ndarray, predicted: np.ndarray, rows: np.ndarray,
                   limit: int) -> list[Suspect]:
    """The `limit` rows of highest self-influence, most suspicious first (ties: the lower row)."""
    order = np.lexsort((rows, -scores))[:limit]
    return [Suspect(int(rows[i]), int(given[i]), int(predicted[i]), float(scores[i])) for i in order]
