"""Connection pruning: every neuron keeps its N largest incoming weights, N chosen per layer on validation.

The weight leaves are the kernels of dense, convolution and attention layers and the embedding tables (a
table is a linear map from one-hot tokens: each embedding dimension's incoming connections are the vocabulary).
An embedding table is pruned by whole rows: every dimension keeps the same N tokens, the N most important ones
(:func:`synthesis.compress.importance.row_importance`, on training rows), so a dropped token costs one mask bit
rather than one per dimension, and the choice does not hinge on the few validation texts that use a rare token.
Pruning is iterative (prune, retrain, prune again: Han et al., "Learning both Weights and Connections for
Efficient Neural Networks", NeurIPS 2015): each round searches N per layer from the current N down, within the
round's slack on the probe rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from core import tree
from core.checkpoint import variable_shapes
from core.graph import validate
from core.reparam import Reparam, mask_top_n_incoming
from core.spec import Spec
from synthesis.compress.context import Context, State, with_params
from synthesis.compress.importance import row_importance
from synthesis.compress.reinit import compressed_start, verify_same_outputs

MIN_SHARE = 0.005
"""Weight leaves holding less than this fraction of the network's connection weights are not pruned: they cost
next to nothing in the artifact, and a thin layer is where pruning hurts most. The SMS Spam network's output
layer (0.002 % of its weights) was pruned to 2-5 of its 64 inputs per class, after which every retraining
validated below its pruned start; left dense, the pruned network retrains to within one validation text of the
dense network. Filter selection leaves such layers' units alone too (:mod:`synthesis.compress.filters`).
"""
GRID_STEPS = 4
"""Steps of N per halving: each grid step keeps about 84 % of a neuron's inputs. Gradual pruning, many small steps
each retrained, loses less than a few large ones (Zhu and Gupta, "To prune, or not to prune", 2017,
https://arxiv.org/abs/1710.01878). With two steps per halving (71 % kept per step), the per-layer searches on
digits found no step within the slack after three rounds and stopped at 18.8x; with four, all six rounds were
accepted (42.3x)."""
TABLE_OPS = {"embedding", "embedding_bag"}
WEIGHT_OPS = {"dense", "conv2d", "conv1d", "depthwise_conv2d", "separable_conv2d", "self_attention", *TABLE_OPS}
_QKV = ("query", "key", "value")


def weight_leaves(spec: Spec) -> list[str]:
    """Flat paths of the network's connection weights (kernels and embedding tables), sorted."""
    ops = {n.id: n.op for n in spec.nodes}
    shapes = tree.flatten(_shapes(spec))
    return [p for p in sorted(shapes) if ops.get(p.split("/")[0]) in WEIGHT_OPS
            and p.rsplit("/", 1)[-1] in ("kernel", "embedding") and len(shapes[p]) >= 2]


def _shapes(spec: Spec) -> dict[str, Any]:
    return tree.unflatten(variable_shapes(validate(spec))["params"])


def weight_shares(spec: Spec, params: Mapping[str, Any]) -> dict[str, float]:
    """Each weight leaf's share of the network's connection weights."""
    leaves = weight_leaves(spec)
    total = sum(int(np.size(params[p])) for p in leaves) or 1
    return {p: int(np.size(params[p])) / total for p in leaves}


def prunable(spec: Spec, params: Mapping[str, Any]) -> list[str]:
    """The weight leaves connection pruning works on: those holding at least ``MIN_SHARE`` of the weights."""
    return [p for p, share in weight_shares(spec, params).items() if share >= MIN_SHARE]


def in_axes(path: str, ndim: int) -> int:
    """Leading axes of a weight leaf that index a neuron's inputs (attention's query/key/value: the first)."""
    parts = path.split("/")
    return 1 if len(parts) >= 3 and parts[-2] in _QKV else ndim - 1


def top_n(weights: Any, n: int, path: str) -> np.ndarray:
    """The 0/1 mask that keeps each neuron's ``n`` largest |incoming weights| (float32, the leaf's shape)."""
    w = np.asarray(weights)
    a = in_axes(path, w.ndim)
    matrix = w.reshape(math.prod(w.shape[:a]), -1)
    return np.asarray(mask_top_n_incoming(jnp.asarray(matrix), n)).reshape(w.shape).astype(np.float32)


def is_table(spec: Spec, path: str) -> bool:
    """Whether ``path`` is an embedding table (pruned by rows)."""
    return spec.node(path.split("/")[0]).op in TABLE_OPS and path.rsplit("/", 1)[-1] == "embedding"


def top_rows(importance: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    """The 0/1 mask (``mask``'s shape) that keeps the ``n`` most important rows among those ``mask`` keeps
    (ties: the earlier row)."""
    live = (np.asarray(mask) != 0).reshape(len(mask), -1).any(axis=1)
    score = np.where(live, np.asarray(importance, np.float64), -np.inf)
    order = np.argsort(-score, kind="stable")[:n]
    keep = np.zeros(len(mask), bool)
    keep[order[live[order]]] = True
    return np.broadcast_to(keep.reshape((-1,) + (1,) * (np.ndim(mask) - 1)), np.shape(mask)).astype(np.float32)


def incoming(mask: np.ndarray, path: str) -> int:
    """The largest number of kept inputs of any neuron."""
    a = in_axes(path, mask.ndim)
    return int((mask.reshape(math.prod(mask.shape[:a]), -1) != 0).sum(axis=0).max())


def grid(current: int) -> list[int]:
    """Values of N to try, from ``current`` (no change) down by factors of ``2 ** (1 / GRID_STEPS)`` to 1."""
    values = {max(1, math.ceil(current * 2 ** (-j / GRID_STEPS)))
              for j in range(1, GRID_STEPS * (max(current, 1).bit_length() + 1))}
    return [current, *sorted((v for v in values if v < current), reverse=True)]


def prune_round(ctx: Context, state: State, slack: float) -> State | None:
    """One round: the smaller masks (pruned weights zero, measured), or None when no layer can lose inputs."""
    if state.reparam.indices:
        raise ValueError("connection pruning runs before bucketing")
    params = tree.flatten(state.variables["params"])
    masks = {p: np.asarray(state.reparam.masks[p]) if p in state.reparam.masks else np.ones(params[p].shape,
                                                                                           np.float32)
             for p in prunable(state.spec, params)}
    grids = {p: grid(incoming(m, p)) for p, m in masks.items()}
    rows = row_importance(ctx, state.spec, state.variables, [p for p in masks if is_table(state.spec, p)])

    def keep(p: str, n: int) -> np.ndarray:
        return top_rows(rows[p], masks[p], n) if p in rows else masks[p] * top_n(params[p], n, p)

    def pruned(choice: Mapping[str, int]) -> dict[str, Any]:
        flat = dict(params)
        for p, n in choice.items():
            flat[p] = jnp.where(jnp.asarray(keep(p, n)) != 0, params[p], 0.0)
        return ctx.recalibrated(state.spec, with_params(state.variables, tree.unflatten(flat)))

    def score(choice: Mapping[str, int]) -> float:
        ctx.tick()
        return ctx.probe_accuracy(state.spec, pruned(choice))

    floor = ctx.probe_floor(state.spec, state.variables, slack)
    choice = ctx.choose(grids, score, floor)
    changed = {p: n for p, n in choice.items() if n != grids[p][0]}
    if not changed:
        return None
    new_masks = {**state.reparam.masks,
                 **{p: jnp.asarray(keep(p, n)) for p, n in changed.items()}}
    reparam = Reparam(new_masks, {}, {})
    scored = pruned(changed)
    start = with_params(scored, compressed_start(state.variables["params"], reparam))
    verify_same_outputs(ctx, (state.spec, scored), (state.spec, start))
    ctx.monitor.event("compress_prune", {"incoming": changed})
    return ctx.state(state.spec, start, reparam)
