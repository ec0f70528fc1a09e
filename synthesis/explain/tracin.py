"""TracIn: how much each training row helped or hurt a prediction.

Pruthi et al., "Estimating Training Data Influence by Tracing Gradient Descent", NeurIPS 2020 (TracInCP): the
influence of a training row on a test input is the sum over checkpoints of the dot product of their loss gradients.
Gradients are those of the output layers only
(`synthesis.explain.subject.output_layers`), per example by ``vmap(grad)``, as the paper's last-layer variant; the
checkpoints are weighted equally (the learning rates of the paper are left out: a schedule's last checkpoints would
count for almost nothing).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

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
                 ) -> jax.Array:
    head = {k: variables["params"][k] for k in layers}

    def loss(part: dict[str, Any], xi: jax.Array, yi: jax.Array) -> jax.Array:
        logits = model.apply({**variables, "params": {**variables["params"], **part}}, xi[None])[0]
        return cast(jax.Array, optax.softmax_cross_entropy_with_integer_labels(logits, yi[None])[0])

    grads = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(head, x, y)
    return jnp.concatenate([g.reshape(len(x), -1) for g in jax.tree.leaves(grads)], axis=1)


def gradients(subject: Subject, x: np.ndarray, y: np.ndarray, check: Callable[[], None] | None = None) -> np.ndarray:
    """Per-example loss gradients of the output layers' parameters ``[N, P]`` (float32), `CHUNK` rows at a time;
    `check` runs between chunks (it may raise)."""
    layers = tuple(output_layers(subject.graph))
    grads = []
    for start in range(0, len(x), CHUNK):
        if check is not None:
            check()
        chunk = jnp.asarray(x[start:start + CHUNK]), jnp.asarray(y[start:start + CHUNK], jnp.int32)
        grads.append(np.asarray(_per_example(subject.model, layers, subject.variables, *chunk)))
    return np.concatenate(grads) if grads else np.zeros((0, 0), np.float32)


def trace(checkpoints: Sequence[Subject], x: np.ndarray, y: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
          check: Callable[[], None] | None = None) -> np.ndarray:
    """The influence ``[T, N]`` of each row on each test input's loss at its given (or predicted) label, summed over
    the checkpoints (positive: the row helped, a proponent; negative: it hurt, an opponent)."""
    influence = np.zeros((len(x_test), len(x)), np.float64)
    if not len(x_test):
        return influence.astype(np.float32)
    for subject in checkpoints:
        g_test = gradients(subject, x_test, y_test)
        for start in range(0, len(x), CHUNK * 8):
            g = gradients(subject, x[start:start + CHUNK * 8], y[start:start + CHUNK * 8], check)
            influence[:, start:start + len(g)] += g_test @ g.T
    return influence.astype(np.float32)
