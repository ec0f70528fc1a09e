"""Structural surgery: remove output units (filters) of a layer, and the inputs that read them.

Removing the units ``keep``'s complement of a conv2d / separable_conv2d / conv1d / dense node
slices that node's kernel and bias and follows the removed channels forward through per-channel
ops (batch_norm, activation, dropout, pooling, global pooling, depthwise_conv2d,
position_embedding), flatten (channel ``c`` of an ``[..., C]`` input is positions ``c, c + C, ...``)
and concat (channels offset by the inputs before it), up to the consumers' weights, whose input
slices are removed too. All inputs of an ``add`` must lose the same channels. Removing units of
a depthwise_conv2d removes whole channel groups and the channels of the layer that produces
them, which must feed nothing else.

**Exactness.** The smaller network computes exactly what the original did when every removed
channel is identically zero where it reaches a consumer's weights (or the output of an add).
For a removed unit that means its kernel and bias are zero and, on the way, every batch_norm has
scale and bias (beta) zero for it (a zero channel otherwise leaves batch_norm as the constant
``beta - mean * scale / sqrt(var + eps)``), every position_embedding is zero there, and no
activation maps 0 to non-zero (sigmoid does). :func:`zero_units` sets up exactly this.
References: Li et al., "Pruning Filters for Efficient ConvNets", ICLR 2017 (L1 filter norms).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from core.checkpoint import flat_variables
from core.errors import SpecError
from core.graph import Graph, validate
from core.spec import INPUT, Spec

UNIT_OPS = {"conv2d": "filters", "separable_conv2d": "filters", "conv1d": "filters",
            "dense": "units"}
"""Ops whose output units can be removed, with the hyper-parameter that counts them."""

_PASS = {"activation", "dropout", "max_pool2d", "avg_pool2d", "max_pool1d", "avg_pool1d",
         "global_avg_pool", "global_max_pool"}
_IN_AXIS = {"conv2d": 2, "conv1d": 1, "dense": 0}

Variables = dict[str, Any]


@dataclass(frozen=True)
class _Cut:
    """Keep only ``keep`` along ``axis`` of ``variables[collection][path]``.

    ``kind``: "own" (the removed units' weights), "channel" (per-channel parameters or state on
    the way) or "consumer" (a consumer's input weights).
    """

    collection: str
    path: tuple[str, ...]
    axis: int
    keep: np.ndarray
    kind: str


def _groups(keep: np.ndarray, multiplier: int) -> np.ndarray:
    """Return the depthwise output channels ``c * m + j`` of input channels ``keep``."""
    return (keep[:, None] * multiplier + np.arange(multiplier)[None, :]).ravel()


def _own_cuts(op: str, node: str, params: Mapping[str, Any], keep: np.ndarray) -> list[_Cut]:
    pre = ("pointwise",) if op == "separable_conv2d" else ()
    cuts = [_Cut("params", (node, *pre, "kernel"), -1, keep, "own")]
    if params["use_bias"]:
        cuts.append(_Cut("params", (node, *pre, "bias"), 0, keep, "own"))
    return cuts


def _plan(graph: Graph, seeds: Mapping[str, np.ndarray], *, zeroing: bool = False) -> list[_Cut]:
    """Return the cuts that remove ``seeds`` (unit op id -> kept units) and follow them forward.

    With ``zeroing``, an add's inputs may differ: a channel of its output counts as removed only
    when it is removed from every input.
    """
    kept: dict[str, np.ndarray] = {}
    cuts: list[_Cut] = []
    for node in graph.order:
        widths = [graph.types[i].shape[-1] for i in node.inputs]
        ins = [kept.get(i) for i in node.inputs]
        nid, op, p = node.id, node.op, node.params
        if any(k is not None for k in ins):
            full = [np.arange(w) if k is None else k for k, w in zip(ins, widths, strict=True)]
            keep = full[0]
            if op in _IN_AXIS:
                cuts.append(_Cut("params", (nid, "kernel"), _IN_AXIS[op], keep, "consumer"))
            elif op == "separable_conv2d":
                mid = _groups(keep, p["depth_multiplier"])
                cuts += [_Cut("params", (nid, "depthwise", "kernel"), 3, mid, "channel"),
                         _Cut("params", (nid, "pointwise", "kernel"), 2, mid, "consumer")]
            elif op == "depthwise_conv2d":
                kept[nid] = mid = _groups(keep, p["depth_multiplier"])
                cuts.append(_Cut("params", (nid, "kernel"), 3, mid, "channel"))
                if p["use_bias"]:
                    cuts.append(_Cut("params", (nid, "bias"), 0, mid, "channel"))
            elif op == "batch_norm":
                kept[nid] = keep
                cuts += [_Cut("params", (nid, "scale"), 0, keep, "channel"),
                         _Cut("params", (nid, "bias"), 0, keep, "channel"),
                         _Cut("batch_stats", (nid, "mean"), 0, keep, "channel"),
                         _Cut("batch_stats", (nid, "var"), 0, keep, "channel")]
            elif op == "position_embedding":
                kept[nid] = keep
                cuts.append(_Cut("params", (nid, "embedding"), 1, keep, "channel"))
            elif op in _PASS:
                kept[nid] = keep
            elif op == "flatten":
                shape = graph.types[node.inputs[0]].shape
                positions = np.arange(math.prod(shape[:-1]))[:, None] * shape[-1]
                kept[nid] = (positions + keep[None, :]).ravel()
            elif op == "concat":
                offsets = np.cumsum([0, *widths[:-1]])
                kept[nid] = np.concatenate([k + o for k, o in zip(full, offsets, strict=True)])
            elif op == "add" and zeroing:
                kept[nid] = np.unique(np.concatenate(full))
            elif op == "add":
                if any(not np.array_equal(k, keep) for k in full[1:]):
                    raise SpecError("removing units would leave the inputs of this add with "
                                    "different channels; remove the same units from all of them",
                                    nid)
                kept[nid] = keep
            else:
                raise SpecError(f"cannot remove input channels of a '{op}' node "
                                "(it mixes channels)", nid)
        if nid in seeds:
            kept[nid] = seeds[nid]
            cuts += _own_cuts(op, nid, p, seeds[nid])
    out = graph.spec.output
    if out in kept and len(kept[out]) != graph.spec.num_classes:
        raise SpecError("removing these units would remove classes from the output", out)
    return cuts


def _seed(graph: Graph, node_id: str, keep: Sequence[int]) -> tuple[str, np.ndarray]:
    """Return the unit op and the units it keeps when ``node_id`` keeps only ``keep``."""
    spec = graph.spec
    try:
        node = next(n for n in graph.order if n.id == node_id)
    except StopIteration:
        raise SpecError("no such node", node_id) from None
    if node_id == spec.output:
        raise SpecError("the output node's units are the class logits and cannot be removed",
                        node_id)
    width = graph.types[node_id].shape[-1]
    k = np.asarray(sorted(int(u) for u in keep), dtype=np.int64)
    if len(set(k.tolist())) != len(k) or (len(k) and (k[0] < 0 or k[-1] >= width)):
        raise SpecError(f"keep must name distinct units in [0, {width}), got {list(keep)}", node_id)
    if len(k) == 0:
        raise SpecError("at least one unit must be kept", node_id)
    if node.op in UNIT_OPS:
        return node_id, k
    if node.op != "depthwise_conv2d":
        raise SpecError(f"'{node.op}' nodes have no units to remove; "
                        f"removable: {sorted(UNIT_OPS)} and depthwise_conv2d", node_id)
    m = node.params["depth_multiplier"]
    channels = np.unique(k // m)
    if not np.array_equal(_groups(channels, m), k):
        raise SpecError(f"a depthwise_conv2d's outputs come in groups of depth_multiplier={m} "
                        "per input channel; keep whole groups", node_id)
    cur, nxt = node.inputs[0], node_id
    while True:
        if cur == INPUT or [c.id for c in spec.consumers(cur)] != [nxt]:
            raise SpecError(f"removing whole channels of this depthwise_conv2d needs '{cur}' to "
                            "be produced by a layer that feeds nothing else", node_id)
        producer = spec.node(cur)
        if producer.op in UNIT_OPS or producer.op == "depthwise_conv2d":
            return _seed(graph, cur, channels.tolist())
        if producer.op not in _PASS | {"batch_norm"}:
            raise SpecError(f"cannot trace this depthwise_conv2d's channels back through "
                            f"'{producer.op}' node '{cur}'", node_id)
        cur, nxt = producer.inputs[0], cur


def _apply(variables: Mapping[str, Any], cuts: Sequence[_Cut], zero: bool) -> Variables:
    out: Variables = _copy(variables)
    for cut in cuts:
        *parents, leaf = cut.path
        holder = out[cut.collection]
        for key in parents:
            holder = holder[key]
        x = jnp.asarray(holder[leaf])
        if not zero:
            holder[leaf] = jnp.take(x, jnp.asarray(cut.keep), axis=cut.axis)
        elif cut.collection == "params" and cut.kind != "consumer":
            axis = cut.axis % x.ndim
            alive = np.zeros(x.shape[axis], bool)
            alive[cut.keep] = True
            shape = [1] * x.ndim
            shape[axis] = x.shape[axis]
            holder[leaf] = jnp.where(jnp.asarray(alive.reshape(shape)), x, jnp.zeros((), x.dtype))
    return out


def _copy(tree: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, Mapping) else v for k, v in tree.items()}


def remove_units_many(spec: Spec, variables: Mapping[str, Any],
                      keep: Mapping[str, Sequence[int]]) -> tuple[Spec, Variables]:
    """Remove units of several nodes at once (``keep``: node id -> units kept).

    See :func:`remove_units`.

    Needed where channels meet in an add, e.g. every layer feeding a residual sum.
    """
    graph = validate(spec)
    flat_variables(graph, variables)  # CheckpointError unless the variables fit the spec
    seeds: dict[str, np.ndarray] = {}
    for node_id, units in keep.items():
        target, k = _seed(graph, node_id, units)
        if target in seeds and not np.array_equal(seeds[target], k):
            raise SpecError("asked to keep two different sets of units", target)
        seeds[target] = k
    cuts = _plan(graph, seeds)
    new_spec = spec
    for target, k in seeds.items():
        node = spec.node(target)
        new_spec = new_spec.replace_node(node.with_params(**{UNIT_OPS[node.op]: len(k)}))
    validate(new_spec)
    return new_spec, _apply(variables, cuts, zero=False)


def remove_units(spec: Spec, variables: Mapping[str, Any], node_id: str,
                 keep: Sequence[int]) -> tuple[Spec, Variables]:
    """Return a smaller spec and variables in which ``node_id`` keeps only the units ``keep``.

    The removed units' weights go, and so do the matching channels of everything downstream up
    to and including the consumers' input weights (see the module docstring, which also says
    when the result is exact). Raises :class:`SpecError` for the output node, an op without
    units, units that cannot be followed (an add whose inputs would differ, layer_norm or
    self_attention on the way) or a ``keep`` that is empty or out of range, and
    :class:`CheckpointError` when ``variables`` do not fit ``spec``.
    """
    return remove_units_many(spec, variables, {node_id: keep})


def zero_units(spec: Spec, variables: Mapping[str, Any], node_id: str,
               units: Sequence[int]) -> Variables:
    """Return ``variables`` with ``units`` of ``node_id`` made identically zero downstream.

    Zeroes the units' kernel and bias and their channels' batch_norm scale and bias,
    depthwise weights and position embeddings up to the consumers, so that
    :func:`remove_units` on them is exact (with activations that map 0 to 0). Raises
    :class:`SpecError` for units out of range and as :func:`remove_units` does otherwise.
    """
    graph = validate(spec)
    flat_variables(graph, variables)
    width = graph.types[node_id].shape[-1] if node_id in graph.types else 0
    dropped = {int(u) for u in units}
    if width and not dropped <= set(range(width)):
        raise SpecError(f"units must lie in [0, {width}), got {list(units)}", node_id)
    keep = sorted(set(range(width)) - dropped)
    target, k = _seed(graph, node_id, keep)
    return _apply(variables, _plan(graph, {target: k}, zeroing=True), zero=True)


def filter_norms(variables: Mapping[str, Any], node_id: str, *, ord: int = 1) -> np.ndarray:
    """Return the L1 (``ord=1``) or L2 (``ord=2``) norm of each output unit's kernel (units,).

    For a separable_conv2d, the pointwise kernel's. Small norms mark units to remove first
    (Li et al., 2017).
    """
    if ord not in (1, 2):
        raise ValueError(f"ord must be 1 or 2, got {ord}")
    params = variables["params"][node_id]
    kernel = params["pointwise"]["kernel"] if "pointwise" in params else params["kernel"]
    k = np.asarray(kernel, np.float64)
    k = k.reshape(-1, k.shape[-1])
    norms: np.ndarray = np.abs(k).sum(axis=0) if ord == 1 else np.sqrt((k * k).sum(axis=0))
    return norms


def removable_nodes(spec: Spec) -> list[str]:
    """Return the ids of the nodes whose units :func:`remove_units` can remove one node at a time.

    Unit ops (see :data:`UNIT_OPS`) other than the output with at least two units, whose removed channels
    can be followed to their consumers (not, e.g., into an ``add`` or a ``layer_norm``), in graph order.
    """
    graph = validate(spec)
    out: list[str] = []
    for node in graph.order:
        width = graph.types[node.id].shape[-1]
        if node.op not in UNIT_OPS or node.id == spec.output or width < 2:
            continue
        try:
            _plan(graph, {node.id: np.arange(width - 1)})
        except SpecError:
            continue
        out.append(node.id)
    return out
