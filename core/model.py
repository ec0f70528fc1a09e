"""Compile a network spec into a Flax linen model.

``build(spec)`` validates the spec and returns a :class:`Model`: one linen module that walks the
graph in topological order with one submodule per node, named by the node's id, so that the
parameters form ``{"params": {node_id: {...}}, "batch_stats": {node_id: {"mean", "var"}}}`` with
the leaf names and shapes of :data:`core.ops.OPS`.

Example::

    model = build(spec)
    variables = model.init(jax.random.key(0))
    logits, stats = model.apply(variables, x)                      # eval
    logits, stats = model.apply(variables, x, train=True, key=k)   # dropout on, stats updated
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from core import kernels, norm
from core.graph import Graph, validate
from core.layers import PositionEmbedding, SeparableConv2D
from core.ops import pool_strides, pool_window
from core.spec import INPUT, Affine, Node, Spec

Variables = dict[str, Any]
Dtype = Any

ACTIVATION_FNS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": nn.relu,
    "relu6": nn.relu6,
    "gelu": lambda x: nn.gelu(x, approximate=False),
    "swish": nn.swish,
    "sigmoid": nn.sigmoid,
    "tanh": jnp.tanh,
    "elu": nn.elu,
    "leaky_relu": lambda x: nn.leaky_relu(x, negative_slope=0.01),
    "identity": lambda x: x,
}
"""The element-wise functions of the ``activation`` op (gelu is the exact erf form)."""


def default_compute_dtype() -> Dtype:
    """Return float32 on CPU and bfloat16 on accelerators."""
    return jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16


def _padding(p: dict[str, Any]) -> str:
    return "SAME" if p["padding"] == "same" else "VALID"


def _call(layer: nn.Module, x: jax.Array) -> jax.Array:
    y: jax.Array = layer(x)
    return y


def _embed(p: dict[str, Any], ids: jax.Array, lowest: int, dtype: Dtype, name: str,
           scale: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """The vectors of ``ids``, zero where an id is below ``lowest`` or outside the vocabulary (and multiplied by
    ``scale`` ``[N, L]`` when given), and the mask of the kept ids (``[N, L, 1]``, the vectors' dtype)."""
    valid = jnp.logical_and(ids >= lowest, ids < p["vocab_size"])
    vectors = _call(nn.Embed(p["vocab_size"], p["dim"], dtype=dtype, name=name), jnp.where(valid, ids, 0))
    keep = valid[..., None].astype(vectors.dtype)
    if scale is not None:
        return vectors * keep * scale[..., None].astype(vectors.dtype), keep
    return vectors * keep, keep


def _node(node: Node, xs: list[jax.Array], train: bool, dtype: Dtype,
          token_scale: jax.Array | None = None) -> jax.Array:
    """Apply one node; submodules are created in the calling module's compact scope. ``token_scale`` ``[N, L]``
    multiplies the vector of each input position an embedding reads (the positions of the raw input row)."""
    p, op, name = node.params, node.op, node.id
    x = xs[0]
    if op == "conv2d":
        return nn.Conv(p["filters"], tuple(p["kernel_size"]), tuple(p["strides"]),
                       padding=_padding(p), use_bias=p["use_bias"], dtype=dtype,
                       conv_general_dilated=kernels.conv_general_dilated, name=name)(x)
    if op == "depthwise_conv2d":
        c = x.shape[-1]
        return nn.Conv(c * p["depth_multiplier"], tuple(p["kernel_size"]), tuple(p["strides"]),
                       padding=_padding(p), feature_group_count=c, use_bias=p["use_bias"],
                       dtype=dtype, conv_general_dilated=kernels.conv_general_dilated, name=name)(x)
    if op == "separable_conv2d":
        return SeparableConv2D(p["filters"], tuple(p["kernel_size"]), tuple(p["strides"]),
                               _padding(p), p["depth_multiplier"], p["use_bias"], dtype,
                               name=name)(x)
    if op == "conv1d":
        return nn.Conv(p["filters"], (p["kernel_size"],), (p["strides"],), padding=_padding(p),
                       use_bias=p["use_bias"], dtype=dtype,
                       conv_general_dilated=kernels.conv_general_dilated, name=name)(x)
    if op == "dense":
        return nn.Dense(p["units"], use_bias=p["use_bias"], dtype=dtype, name=name)(x)
    if op == "embedding":
        scale = None if token_scale is None else token_scale[:, :p["length"]]
        return _embed(p, x[:, :p["length"]], 0, dtype, name, scale)[0]
    if op == "embedding_bag":
        scale = None if token_scale is None else token_scale[:, p["start"]:]
        vectors, keep = _embed(p, x[:, p["start"]:], p["lowest"], dtype, name, scale)
        total, count = jnp.sum(vectors, axis=1), jnp.sum(keep, axis=1)
        divisor = {"mean": count, "sqrt": jnp.sqrt(count), "sum": jnp.ones_like(count)}[p["norm"]]
        return total / jnp.maximum(divisor, 1.0)
    if op in ("max_pool2d", "max_pool1d"):
        return kernels.max_pool(x, pool_window(p), pool_strides(p))
    if op in ("avg_pool2d", "avg_pool1d"):
        return kernels.avg_pool(x, pool_window(p), pool_strides(p))
    if op == "global_avg_pool":
        return jnp.mean(x, axis=tuple(range(1, x.ndim - 1)))
    if op == "global_max_pool":
        return jnp.max(x, axis=tuple(range(1, x.ndim - 1)))
    if op == "batch_norm":
        return _call(norm.BatchNorm(use_running_average=not train, momentum=p["momentum"],
                                    epsilon=p["epsilon"], dtype=dtype, name=name), x)
    if op == "layer_norm":
        return _call(nn.LayerNorm(epsilon=p["epsilon"], dtype=dtype, name=name), x)
    if op == "activation":
        return ACTIVATION_FNS[p["fn"]](x)
    if op == "dropout":
        return _call(nn.Dropout(p["rate"], deterministic=not train, name=name), x)
    if op == "flatten":
        return x.reshape(x.shape[0], -1)
    if op == "add":
        out = xs[0]
        for other in xs[1:]:
            out = out + other
        return out
    if op == "concat":
        return jnp.concatenate(xs, axis=-1)
    if op == "self_attention":
        d = x.shape[-1]
        return _call(nn.MultiHeadDotProductAttention(p["num_heads"], dtype=dtype, qkv_features=d,
                                                     out_features=d, deterministic=True,
                                                     force_fp32_for_softmax=True, name=name), x)
    if op == "position_embedding":
        return PositionEmbedding(dtype=dtype, name=name)(x)
    raise NotImplementedError(f"op '{op}' has no Flax implementation")  # pragma: no cover


class Network(nn.Module):
    """The linen module of a validated graph: one submodule per node, named by its id."""

    graph: Graph
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False, taps: Mapping[str, jax.Array] | None = None,
                 token_scale: jax.Array | None = None, capture: tuple[str, ...] = ()) -> jax.Array:
        """Return the logits ``[N, num_classes]`` (float32) for a batch of raw inputs.

        For attribution (:meth:`Model.probe`): ``taps`` adds an array to the output of the nodes it names,
        ``token_scale`` scales the embedding vector of each input position, and the outputs of the nodes in
        ``capture`` are sown into the ``intermediates`` collection."""
        spec = self.graph.spec
        if spec.input.dtype == "int32":
            x = jnp.asarray(x).astype(jnp.int32)
        else:
            x = jnp.asarray(x).astype(jnp.float32)
            x = x * _per_channel(spec.input.scale, x.ndim) + _per_channel(spec.input.offset, x.ndim)
            x = x.astype(self.dtype)
        values: dict[str, jax.Array] = {INPUT: x}
        for node in self.graph.order:
            value = _node(node, [values[i] for i in node.inputs], train, self.dtype, token_scale)
            if taps is not None and node.id in taps:
                value = value + taps[node.id].astype(value.dtype)
            if node.id in capture:
                self.sow("intermediates", captured_name(node.id), value)
            values[node.id] = value
        return values[spec.output].astype(jnp.float32)


def captured_name(node_id: str) -> str:
    """The name a captured node output is sown under (node ids name the submodules, so not the id itself)."""
    return f"{node_id}@out"


def _per_channel(value: Affine, rank: int) -> float | jax.Array:
    """A scale or offset broadcastable over inputs of `rank` (batch axis included): per channel on the last axis."""
    if isinstance(value, tuple):
        return jnp.asarray(value, jnp.float32).reshape((1,) * (rank - 1) + (len(value),))
    return value


INIT_COMPILER_OPTIONS: dict[str, str | bool] = {"xla_backend_optimization_level": "0"}
"""XLA options of the compiled init: it runs once per network, so its code need not be fast, and unoptimised it
compiles several times sooner (on the CPU, 0.8 s instead of 4.0 s for the hand-written digits CNN, whose random
initialisers dominate; the values agree to within 1e-7, float rounding)."""


@dataclass(frozen=True, eq=False)
class Model:
    """A compiled network: pure ``init`` and ``apply`` functions over a variables pytree."""

    graph: Graph
    compute_dtype: Dtype
    module: Network

    @property
    def spec(self) -> Spec:
        """Return the validated spec (hyper-parameters normalised, defaults filled in)."""
        return self.graph.spec

    @property
    def has_batch_stats(self) -> bool:
        """Return whether the network keeps batch statistics (has a batch_norm node)."""
        return any(n.op == "batch_norm" for n in self.graph.order)

    @property
    def has_dropout(self) -> bool:
        """Return whether the network has a dropout node (``apply`` then needs a key to train)."""
        return any(n.op == "dropout" for n in self.graph.order)

    def example_input(self, batch: int = 1) -> jax.Array:
        """Return a zero input batch of the spec's shape and dtype."""
        inp = self.spec.input
        return jnp.zeros((batch, *inp.shape), jnp.int32 if inp.dtype == "int32" else jnp.float32)

    @functools.cached_property
    def _compiled_inits(self) -> dict[tuple[Any, ...], Any]:
        """The compiled module init per kind of key, compiled once per model rather than once per call."""
        return {}

    def _init_variables(self, key: jax.Array, x: jax.Array) -> Any:
        if isinstance(key, jax.core.Tracer):  # inside a transformation (jit, eval_shape): traced as any code is
            return self.module.init({"params": key}, x, train=False)
        kind = (key.shape, str(key.dtype))
        if kind not in self._compiled_inits:
            lowered = jax.jit(lambda k, x: self.module.init({"params": k}, x, train=False)).lower(key, x)
            self._compiled_inits[kind] = lowered.compile(compiler_options=INIT_COMPILER_OPTIONS)
        return self._compiled_inits[kind](key, x)

    def init(self, key: jax.Array) -> Variables:
        """Return freshly initialised variables: ``{"params": ..., "batch_stats": ...}``.

        ``"batch_stats"`` is present only when the network has batch_norm; ``"params"`` always.
        """
        variables = self._init_variables(key, self.example_input())
        out: Variables = {"params": dict(variables.get("params", {}))}
        if self.has_batch_stats:
            out["batch_stats"] = dict(variables["batch_stats"])
        return out

    def apply(self, variables: Variables, x: Any, *, train: bool = False,
              key: jax.Array | None = None) -> tuple[jax.Array, dict[str, Any]]:
        """Return ``(logits [N, num_classes] float32, new_batch_stats)``.

        In training mode batch_norm uses (and updates) batch statistics and dropout draws its
        masks from ``key``; in eval mode the batch statistics come back unchanged.
        """
        stats = variables.get("batch_stats", {})
        rngs: dict[str, jax.Array] = {}
        if train and self.has_dropout:
            if key is None:
                raise ValueError("apply(train=True) needs a key: the network has dropout")
            rngs["dropout"] = key
        inputs: Variables = {"params": variables["params"]}
        if self.has_batch_stats:
            inputs["batch_stats"] = stats
        if not (train and self.has_batch_stats):
            logits = cast(jax.Array, self.module.apply(inputs, x, train=train, rngs=rngs))
            return logits, stats
        out, updates = self.module.apply(inputs, x, train=True, rngs=rngs, mutable=["batch_stats"])
        return out, dict(updates["batch_stats"])

    def probe(self, variables: Variables, x: Any, *, taps: Mapping[str, jax.Array] | None = None,
              token_scale: jax.Array | None = None, capture: tuple[str, ...] = ()
              ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Return ``(logits, {node id: output})`` in eval mode, for attribution methods that need a network's
        inside: ``taps`` adds an array to the named nodes' outputs (its gradient is theirs), ``token_scale``
        ``[N, L]`` scales the embedding vector of each position of an int32 input row, ``capture`` names the
        nodes whose outputs come back."""
        inputs: Variables = {"params": variables["params"]}
        if self.has_batch_stats:
            inputs["batch_stats"] = variables.get("batch_stats", {})
        logits, state = self.module.apply(inputs, x, train=False, taps=taps, token_scale=token_scale,
                                          capture=tuple(capture), mutable=["intermediates"])
        sown = state.get("intermediates", {})
        return cast(jax.Array, logits), {name: sown[captured_name(name)][0] for name in capture}


def build(spec: Spec | Graph, *, compute_dtype: Dtype = None) -> Model:
    """Validate ``spec`` (if not already a :class:`~core.graph.Graph`) and compile it.

    ``compute_dtype`` is the dtype of activations and matmuls (parameters stay float32);
    ``None`` picks float32 on CPU and bfloat16 on GPU/TPU. Logits are always float32.
    """
    graph = spec if isinstance(spec, Graph) else validate(spec)
    dtype = default_compute_dtype() if compute_dtype is None else jnp.dtype(compute_dtype)
    return Model(graph, dtype, Network(graph, dtype))
