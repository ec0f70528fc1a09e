"""ONNX converters, one per op of :data:`core.ops.OPS`, that mirror :mod:`core.model` exactly.

Tensors stay channels-last (``[N, H, W, C]``, ``[N, L, C]``) between nodes, as in the JAX model,
so that ``flatten``, ``dense``, ``concat`` and the norms work on the last axis unchanged; each
convolution and pooling is wrapped in a ``Transpose`` to ONNX's channels-first layout and back
(onnxruntime's transpose optimiser cancels the pairs between consecutive convolutions).

References: ONNX operator docs, https://onnx.ai/onnx/operators/; Flax
``MultiHeadDotProductAttention`` (Vaswani et al., 2017) for ``self_attention``.
"""

from __future__ import annotations

import math

import numpy as np

from core.onnx_builder import Builder, Converter, Params
from core.onnx_tokens import embedding, embedding_bag, position_embedding
from core.ops import TensorType, pool_strides, pool_window
from core.spec import Node


def _channels_first(b: Builder, x: str, rank: int, hint: str) -> str:
    return b.op("Transpose", [x], f"{hint}/nchw", perm=[0, rank - 1, *range(1, rank - 1)])


def _channels_last(b: Builder, x: str, rank: int, hint: str) -> str:
    return b.op("Transpose", [x], hint, perm=[0, *range(2, rank), 1])


def _same_pads(size: tuple[int, ...], window: list[int], strides: list[int]) -> list[int]:
    """Return ONNX pads ``[begin..., end...]`` of XLA's 'SAME' padding (extra on the end)."""
    lo, hi = [], []
    for n, k, s in zip(size, window, strides, strict=True):
        total = max((math.ceil(n / s) - 1) * s + k - n, 0)
        lo.append(total // 2)
        hi.append(total - total // 2)
    return lo + hi


def _conv(b: Builder, x: str, t: TensorType, kernel: np.ndarray, bias: np.ndarray | None,
          strides: list[int], padding: str, group: int, hint: str) -> str:
    """Channels-last convolution with a Flax kernel ``(*window, cin / group, cout)``."""
    rank = len(t.shape) + 1
    window = list(kernel.shape[:-2])
    pads = _same_pads(t.shape[:-1], window, strides) if padding == "same" else [0] * 2 * len(window)
    weight = np.transpose(kernel, (kernel.ndim - 1, kernel.ndim - 2, *range(kernel.ndim - 2)))
    inputs = [_channels_first(b, x, rank, hint), b.const(f"{hint}/weight", weight)]
    if bias is not None:
        inputs.append(b.const(f"{hint}/bias", bias))
    y = b.op("Conv", inputs, f"{hint}/conv", kernel_shape=window, strides=strides, pads=pads,
             group=group)
    return _channels_last(b, y, rank, hint)


def conv2d(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """2-D convolution."""
    q = n.params
    return _conv(b, xs[0], ts[0], p["kernel"], p.get("bias"), q["strides"], q["padding"], 1, n.id)


def depthwise_conv2d(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Per-channel convolution: an ONNX group convolution with one group per input channel."""
    q = n.params
    return _conv(b, xs[0], ts[0], p["kernel"], p.get("bias"), q["strides"], q["padding"],
                 ts[0].shape[-1], n.id)


def separable_conv2d(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Depthwise convolution (no bias) then a 1x1 convolution."""
    q, t = n.params, ts[0]
    y = _conv(b, xs[0], t, p["depthwise"]["kernel"], None, q["strides"], q["padding"],
              t.shape[-1], f"{n.id}/depthwise")
    mid = TensorType((1, 1, t.shape[-1] * q["depth_multiplier"]))  # a 1x1 'valid' conv: rank only
    pw = p["pointwise"]
    return _conv(b, y, mid, pw["kernel"], pw.get("bias"), [1, 1], "valid", 1, n.id)


def conv1d(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """1-D convolution over ``[N, L, C]``."""
    q = n.params
    return _conv(b, xs[0], ts[0], p["kernel"], p.get("bias"), [q["strides"]], q["padding"], 1, n.id)


def dense(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """``x @ kernel + bias`` on the last axis."""
    y = b.op("MatMul", [xs[0], b.const(f"{n.id}/kernel", p["kernel"])], f"{n.id}/matmul")
    if "bias" not in p:
        return y
    return b.op("Add", [y, b.const(f"{n.id}/bias", p["bias"])], n.id)


def _pool(op_type: str) -> Converter:
    def convert(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
        rank = len(ts[0].shape) + 1
        y = b.op(op_type, [_channels_first(b, xs[0], rank, n.id)], f"{n.id}/pool",
                 kernel_shape=pool_window(n.params), strides=pool_strides(n.params))
        return _channels_last(b, y, rank, n.id)

    convert.__doc__ = f"'valid' {op_type} over the spatial axes."
    return convert


def _global(op_type: str) -> Converter:
    def convert(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
        return b.reduce(op_type, xs[0], list(range(1, len(ts[0].shape))), n.id)

    convert.__doc__ = f"{op_type} over all spatial axes."
    return convert


def batch_norm(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Inference batch norm from running statistics (``p`` holds scale, bias, mean and var)."""
    var = np.asarray(p["var"], np.float32) + np.float32(n.params["epsilon"])
    mul = np.asarray(p["scale"], np.float32) * (np.float32(1.0) / np.sqrt(var))
    y = b.op("Sub", [xs[0], b.const(f"{n.id}/mean", p["mean"])], f"{n.id}/centred")
    y = b.op("Mul", [y, b.const(f"{n.id}/mul", mul)], f"{n.id}/scaled")
    return b.op("Add", [y, b.const(f"{n.id}/bias", p["bias"])], n.id)


def layer_norm(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Layer normalisation over the last axis."""
    return b.op("LayerNormalization", [xs[0], b.const(f"{n.id}/scale", p["scale"]),
                                       b.const(f"{n.id}/bias", p["bias"])],
                n.id, axis=-1, epsilon=float(n.params["epsilon"]))


def activation(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Element-wise non-linearity; gelu is the exact ``x * (1 + erf(x / sqrt 2)) / 2``."""
    x, fn, h = xs[0], n.params["fn"], n.id
    simple = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "identity": "Identity"}
    if fn in simple:
        return b.op(simple[fn], [x], h)
    if fn == "relu6":
        return b.op("Clip", [x, b.const(f"{h}/lo", 0.0), b.const(f"{h}/hi", 6.0)], h)
    if fn == "elu":
        return b.op("Elu", [x], h, alpha=1.0)
    if fn == "leaky_relu":
        return b.op("LeakyRelu", [x], h, alpha=0.01)
    if fn == "swish":
        return b.op("Mul", [x, b.op("Sigmoid", [x], f"{h}/sigmoid")], h)
    if fn == "gelu":
        erf = b.op("Erf", [b.op("Mul", [x, b.const(f"{h}/rsqrt2", 1 / math.sqrt(2))], f"{h}/z")],
                   f"{h}/erf")
        half = b.op("Mul", [x, b.const(f"{h}/half", 0.5)], f"{h}/halfx")
        return b.op("Mul", [half, b.op("Add", [erf, b.const(f"{h}/one", 1.0)], f"{h}/1p")], h)
    raise NotImplementedError(f"activation '{fn}' has no ONNX converter")


def identity(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Dropout at inference: the identity."""
    return b.op("Identity", [xs[0]], n.id)


def flatten(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Row-major flatten of the channels-last tensor to ``[N, prod(shape)]``."""
    return b.op("Flatten", [xs[0]], n.id, axis=1)


def add(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Sum of all inputs, left to right."""
    out = xs[0]
    for i, other in enumerate(xs[1:]):
        out = b.op("Add", [out, other], n.id if i == len(xs) - 2 else f"{n.id}/sum")
    return out


def concat(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Concatenation on the last axis."""
    return b.op("Concat", xs, n.id, axis=-1)


def self_attention(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Flax multi-head self-attention: head projections, ``softmax(q k^T / sqrt(hd)) v``, out."""
    x, h = xs[0], n.id
    d, heads = ts[0].shape[-1], n.params["num_heads"]
    hd = d // heads
    split = b.const(f"{h}/heads_shape", [0, 0, heads, hd], np.int64)

    def project(name: str, perm: list[int]) -> str:
        kernel = np.asarray(p[name]["kernel"]).reshape(d, heads * hd)
        y = b.op("MatMul", [x, b.const(f"{h}/{name}/kernel", kernel)], f"{h}/{name}/matmul")
        y = b.op("Add", [y, b.const(f"{h}/{name}/bias", np.asarray(p[name]["bias"]).reshape(-1))],
                 f"{h}/{name}/proj")
        y = b.op("Reshape", [y, split], f"{h}/{name}/split")  # [N, L, H, hd]
        return b.op("Transpose", [y], f"{h}/{name}/heads", perm=perm)

    depth = b.const(f"{h}/rsqrt_depth", 1 / math.sqrt(hd))
    q = b.op("Mul", [project("query", [0, 2, 1, 3]), depth], f"{h}/query/scaled")  # [N, H, L, hd]
    k = project("key", [0, 2, 3, 1])                                # [N, H, hd, L]
    v = project("value", [0, 2, 1, 3])                              # [N, H, L, hd]
    weights = b.op("Softmax", [b.op("MatMul", [q, k], f"{h}/logits")], f"{h}/weights", axis=-1)
    context = b.op("MatMul", [weights, v], f"{h}/context")          # [N, H, L, hd]
    y = b.op("Transpose", [context], f"{h}/merge", perm=[0, 2, 1, 3])
    y = b.op("Reshape", [y, b.const(f"{h}/merged_shape", [0, 0, d], np.int64)], f"{h}/merged")
    out = p["out"]
    y = b.op("MatMul", [y, b.const(f"{h}/out/kernel", np.asarray(out["kernel"]).reshape(d, d))],
             f"{h}/out/matmul")
    return b.op("Add", [y, b.const(f"{h}/out/bias", out["bias"])], h)


CONVERTERS: dict[str, Converter] = {
    "conv2d": conv2d,
    "depthwise_conv2d": depthwise_conv2d,
    "separable_conv2d": separable_conv2d,
    "conv1d": conv1d,
    "dense": dense,
    "embedding": embedding,
    "embedding_bag": embedding_bag,
    "max_pool2d": _pool("MaxPool"),
    "avg_pool2d": _pool("AveragePool"),
    "max_pool1d": _pool("MaxPool"),
    "avg_pool1d": _pool("AveragePool"),
    "global_avg_pool": _global("ReduceMean"),
    "global_max_pool": _global("ReduceMax"),
    "batch_norm": batch_norm,
    "layer_norm": layer_norm,
    "activation": activation,
    "dropout": identity,
    "flatten": flatten,
    "add": add,
    "concat": concat,
    "self_attention": self_attention,
    "position_embedding": position_embedding,
}
"""op -> converter ``(builder, node, input names, input types, numpy params) -> output name``."""
