"""Evaluation and prediction of a compiled network in eval mode, batched over the local devices."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core import parallel
from core.data import eval_batches, prefetch_to_device
from core.model import Model


def evaluate(
    model: Model, variables: dict[str, Any], x: np.ndarray, y: np.ndarray, *,
    batch_size: int = 1024, devices: Sequence[jax.Device] | None = None,
) -> dict[str, float]:
    """Return ``{"loss", "accuracy"}`` of ``model`` on ``(x, y)`` in eval mode.

    The loss is the plain (not label-smoothed) mean cross-entropy.
    """
    mesh = parallel.data_mesh(devices)
    batch = parallel.round_batch(min(batch_size, max(1, len(x))), mesh)
    return evaluate_on_mesh(model, variables, x, y, batch, mesh)


def predict_proba(
    model: Model, variables: dict[str, Any], x: np.ndarray, *,
    batch_size: int = 1024, devices: Sequence[jax.Device] | None = None,
) -> np.ndarray:
    """Return the class probabilities ``[N, num_classes]`` (float32) of ``model`` on ``x``."""
    mesh = parallel.data_mesh(devices)
    batch = parallel.round_batch(min(batch_size, max(1, len(x))), mesh)
    variables = jax.device_put(variables, parallel.replicated(mesh))
    outs = [_proba_batch(model, variables, xb)
            for xb, _, _ in prefetch_to_device(eval_batches(x, None, batch), mesh)]
    if not outs:
        return np.zeros((0, model.spec.num_classes), np.float32)
    return np.concatenate(jax.device_get(outs))[: len(x)]


def evaluate_on_mesh(model: Model, variables: dict[str, Any], x: np.ndarray, y: np.ndarray,
              batch: int, mesh: jax.sharding.Mesh) -> dict[str, float]:
    """Return ``{"loss", "accuracy"}`` on ``(x, y)`` with a given batch size and device mesh."""
    if len(x) == 0:
        return {"loss": math.nan, "accuracy": math.nan}
    variables = jax.device_put(variables, parallel.replicated(mesh))
    sums = [_eval_batch(model, variables, xb, yb, valid)
            for xb, yb, valid in prefetch_to_device(eval_batches(x, y, batch), mesh)]
    loss, correct = np.sum(np.asarray(jax.device_get(sums), np.float64), axis=0)
    return {"loss": float(loss / len(x)), "accuracy": float(correct / len(x))}


@functools.partial(jax.jit, static_argnums=0)
def _eval_batch(model: Model, variables: dict[str, Any], x: jax.Array, y: jax.Array,
                valid: jax.Array) -> jax.Array:
    logits, _ = model.apply(variables, x, train=False)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    correct = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
    return jnp.stack([jnp.sum(loss * valid), jnp.sum(correct * valid)])


@functools.partial(jax.jit, static_argnums=0)
def _proba_batch(model: Model, variables: dict[str, Any], x: jax.Array) -> jax.Array:
    logits, _ = model.apply(variables, x, train=False)
    return jax.nn.softmax(logits, axis=-1)
