"""Evaluation and prediction of a compiled network in eval mode, batched over the local devices.

Batches have a few fixed sizes: a set of ``n`` rows is cut into batches of ``batch_size`` rows, or of the power of
two at or above ``n`` when that is smaller, and the last partial batch is padded (padding rows weigh nothing), so
one compiled program serves every batch of a set and sets of similar sizes (a network's validation and test rows)
alike. Networks built separately from the same spec share their compiled programs.
"""

from __future__ import annotations

import collections
import functools
import json
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
    batch_size: int = 1024, devices: Sequence[parallel.Device] | None = None,
) -> dict[str, float]:
    """Return ``{"loss", "accuracy", "uniform_loss"}`` of ``model`` on ``(x, y)`` in eval mode.

    The loss is the plain (not label-smoothed) mean cross-entropy; ``uniform_loss`` the mean cross-entropy
    against the uniform distribution over the classes, so that ``(1 - s) * loss + s * uniform_loss`` is the
    cross-entropy against targets label-smoothed by ``s`` (Szegedy et al., "Rethinking the Inception
    Architecture", CVPR 2016), the loss such a model was trained to lower.
    """
    return evaluate_on_mesh(model, variables, x, y, batch_size, parallel.data_mesh(devices))


def predict_proba(
    model: Model, variables: dict[str, Any], x: np.ndarray, *,
    batch_size: int = 1024, devices: Sequence[parallel.Device] | None = None,
) -> np.ndarray:
    """Return the class probabilities ``[N, num_classes]`` (float32) of ``model`` on ``x``."""
    mesh = parallel.data_mesh(devices)
    variables = jax.device_put(variables, parallel.replicated(mesh))
    batches = eval_batches(x, None, _batch(batch_size, len(x), mesh))
    shared = _shared(model)
    outs = [_proba_batch(shared, variables, xb) for xb, _, _ in prefetch_to_device(batches, mesh)]
    if not outs:
        return np.zeros((0, model.spec.num_classes), np.float32)
    return np.concatenate(jax.device_get(outs))[: len(x)]


def evaluate_on_mesh(model: Model, variables: dict[str, Any], x: np.ndarray, y: np.ndarray,
                     batch_size: int, mesh: jax.sharding.Mesh) -> dict[str, float]:
    """Return ``{"loss", "accuracy", "uniform_loss"}`` (see :func:`evaluate`) on ``(x, y)`` over a given
    device mesh."""
    if len(x) == 0:
        return {"loss": math.nan, "accuracy": math.nan, "uniform_loss": math.nan}
    variables = jax.device_put(variables, parallel.replicated(mesh))
    batches = eval_batches(x, y, _batch(batch_size, len(x), mesh))
    shared = _shared(model)
    sums = [_eval_batch(shared, variables, xb, yb, valid)
            for xb, yb, valid in prefetch_to_device(batches, mesh)]
    loss, correct, uniform = np.sum(np.asarray(jax.device_get(sums), np.float64), axis=0)
    n = len(x)
    return {"loss": float(loss / n), "accuracy": float(correct / n), "uniform_loss": float(uniform / n)}


def _batch(batch_size: int, n: int, mesh: jax.sharding.Mesh) -> int:
    """Return ``batch_size`` capped at the power of two at or above ``n`` rows, rounded up to the mesh's device
    count."""
    return parallel.round_batch(min(batch_size, bucket(n)), mesh)


def bucket(n: int) -> int:
    """The power of two at or above ``n`` (at least 1): the batch a set of ``n`` rows is evaluated in."""
    return 1 << max(n - 1, 0).bit_length()


_SHARED: collections.OrderedDict[tuple[str, str], Model] = collections.OrderedDict()
SHARED_MODELS = 64
"""Networks whose compiled evaluation programs are kept for other builds of the same spec (least recent dropped)."""


def _shared(model: Model) -> Model:
    """The first-built network of ``model``'s spec and compute dtype still kept: a jitted function's static
    argument, so that the programs compiled for it serve every build of that spec."""
    key = (json.dumps(model.spec.to_dict(), sort_keys=True), str(model.compute_dtype))
    kept = _SHARED.get(key)
    if kept is None:
        _SHARED[key] = kept = model
        while len(_SHARED) > SHARED_MODELS:
            _SHARED.popitem(last=False)
    _SHARED.move_to_end(key)
    return kept


@functools.partial(jax.jit, static_argnums=0)
def _eval_batch(model: Model, variables: dict[str, Any], x: jax.Array, y: jax.Array,
                valid: jax.Array) -> jax.Array:
    logits, _ = model.apply(variables, x, train=False)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    correct = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
    uniform = -jnp.mean(jax.nn.log_softmax(logits, axis=-1), axis=-1)
    return jnp.stack([jnp.sum(loss * valid), jnp.sum(correct * valid), jnp.sum(uniform * valid)])


@functools.partial(jax.jit, static_argnums=0)
def _proba_batch(model: Model, variables: dict[str, Any], x: jax.Array) -> jax.Array:
    logits, _ = model.apply(variables, x, train=False)
    return jax.nn.softmax(logits, axis=-1)


def recalibrate(model: Model, variables: dict[str, Any], x: np.ndarray, *, batch_size: int = 1024
                ) -> dict[str, Any]:
    """Return ``variables`` with every batch norm's running mean and variance replaced by the statistics of its
    input on ``x`` (training-mode forward passes, averaged over batches of ``batch_size`` rows); ``variables``
    themselves when the network has no batch norm or ``x`` is empty.

    After weights are pruned, shared or removed, the stored statistics no longer describe the network's
    activations; re-estimating them makes a candidate's accuracy before retraining a far better guide to its
    accuracy after (adaptive batch norm: Li et al., "EagleEye: Fast Sub-net Evaluation for Efficient Neural
    Network Pruning", ECCV 2020, https://arxiv.org/abs/2007.02491).
    """
    if not model.has_batch_stats or len(x) == 0:
        return variables
    zeroed = {**variables, "batch_stats": jax.tree.map(jnp.zeros_like, variables["batch_stats"])}
    momentum = {n.id: float(n.params["momentum"]) for n in model.graph.order if n.op == "batch_norm"}
    parts = []  # each batch's statistics weighted by its share of the rows
    for start in range(0, len(x), batch_size):
        xb = jnp.asarray(x[start:start + batch_size])
        stats = _train_stats(model, zeroed, xb)  # momentum * 0 + (1 - momentum) * the batch's statistics
        parts.append({n: jax.tree.map(functools.partial(jnp.multiply, len(xb) / len(x) / (1.0 - momentum[n])), s)
                      for n, s in stats.items()})
    return {**variables, "batch_stats": jax.tree.map(lambda *s: sum(s[1:], s[0]), *parts)}


@functools.partial(jax.jit, static_argnums=0)
def _train_stats(model: Model, variables: dict[str, Any], x: jax.Array) -> dict[str, Any]:
    return model.apply(variables, x, train=True, key=jax.random.key(0))[1]
