"""How much each unit (filter, dense unit) matters, so that the least important are removed first.

``taylor``: the first-order Taylor estimate of the change in validation loss when a unit's output is zeroed,
``|sum_i a_i dL/da_i|`` (Molchanov et al., "Pruning Convolutional Neural Networks for Resource Efficient
Inference", ICLR 2017), computed per validation batch and averaged. Scaling a unit's output by ``s`` scales its
kernel and bias (or, with a batch_norm right after it, that batch_norm's scale and bias instead) by ``s``, so
``a . dL/da = sum_w w dL/dw`` over those parameters: one gradient per batch scores every unit.
``l1``: the L1 norm of each unit's kernel (Li et al., "Pruning Filters for Efficient ConvNets", ICLR 2017).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import optax

from core.model import Model
from core.spec import Spec
from core.surgery import filter_norms
from synthesis.compress.context import Context

BATCH = 256
ROW_ROWS = 8192
"""Training rows :func:`row_importance` scores on (at most)."""


@functools.partial(jax.jit, static_argnums=0)
def _grads(model: Model, variables: dict[str, Any], x: jax.Array, y: jax.Array) -> Any:
    def loss(params: Any) -> jax.Array:
        logits, _ = model.apply({**variables, "params": params}, x)
        out: jax.Array = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        return out

    return jax.grad(loss)(variables["params"])


def _scale_leaves(spec: Spec, node_id: str) -> list[tuple[str, ...]]:
    """Parameter paths whose scaling by s scales the unit outputs of ``node_id`` by s (per-unit last axis)."""
    consumers = spec.consumers(node_id)
    if len(consumers) == 1 and consumers[0].op == "batch_norm":
        return [(consumers[0].id, "scale"), (consumers[0].id, "bias")]
    own = ("pointwise",) if spec.node(node_id).op == "separable_conv2d" else ()
    return [(node_id, *own, "kernel"), (node_id, *own, "bias")]


def _leaf(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def unit_importance(ctx: Context, spec: Spec, variables: dict[str, Any], nodes: Sequence[str],
                    method: str) -> dict[str, np.ndarray]:
    """Return each node's per-unit importance (higher matters more) by ``method`` (``taylor`` or ``l1``)."""
    if method == "l1":
        return {n: filter_norms(variables, n) for n in nodes}
    model = ctx.model(spec)
    x, y = ctx.x_probe, ctx.y_probe
    batch = min(BATCH, len(x))
    totals = {n: np.zeros(0) for n in nodes}
    batches = max(len(x) // batch, 1)
    for b in range(batches):
        grads = _grads(model, variables, x[b * batch:(b + 1) * batch], y[b * batch:(b + 1) * batch])
        for n in nodes:
            terms = 0.0
            for path in _scale_leaves(spec, n):
                w, g = _leaf(variables["params"], path), _leaf(grads, path)
                if w is not None and g is not None:
                    prod = np.asarray(w, np.float64) * np.asarray(g, np.float64)
                    terms = terms + prod.reshape(-1, prod.shape[-1]).sum(axis=0)
            totals[n] = np.abs(np.asarray(terms)) + (totals[n] if totals[n].size else 0.0)
    return {n: t / batches for n, t in totals.items()}


def row_importance(ctx: Context, spec: Spec, variables: dict[str, Any], paths: Sequence[str]) -> dict[str, np.ndarray]:
    """Return each embedding leaf's per-row importance (higher matters more): ``sum_batches |sum_d W G|`` on up to
    ``ROW_ROWS`` training rows (first-order Taylor estimate of zeroing the row)."""
    model = ctx.model(spec)
    x, y = ctx.data.x_train[:ROW_ROWS], ctx.data.y_train[:ROW_ROWS]
    weights = {p: np.asarray(_leaf(variables["params"], tuple(p.split("/"))), np.float64) for p in paths}
    totals = {p: np.zeros(len(w)) for p, w in weights.items()}
    for b in range(0, len(x), BATCH):
        grads = _grads(model, variables, x[b:b + BATCH], y[b:b + BATCH])
        for p, w in weights.items():
            g = np.asarray(_leaf(grads, tuple(p.split("/"))), np.float64)
            totals[p] += np.abs((w * g).reshape(len(w), -1).sum(axis=1))
    return totals
