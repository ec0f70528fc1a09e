"""The operations a spec may use: hyper-parameters, arity, shape inference, parameters and cost.

Shapes exclude the batch axis. Images are ``[H, W, C]``, sequences ``[L, C]``, token ids ``[L]``.
Parameter shapes follow the Flax layers that :mod:`core.model` builds, keyed by the same names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import ShapeError
from core.op_params import HP

Shape = tuple[int, ...]
ParamShapes = dict[str, Any]  # name -> shape tuple, or a nested dict of them

ACTIVATIONS = ("relu", "relu6", "gelu", "swish", "sigmoid", "tanh", "elu", "leaky_relu", "identity")
PADDING = HP("choice", "same", choices=("same", "valid"))
BIAS = HP("bool", True)
BAG_NORMS = ("mean", "sqrt", "sum")
"""What an embedding_bag divides its sum of vectors by: the count of ids, its square root, or nothing."""


@dataclass(frozen=True)
class TensorType:
    """The static type of a node's output: shape without batch axis and dtype."""

    shape: Shape
    dtype: str = "float32"


@dataclass(frozen=True)
class OpDef:
    """How one op is checked and costed. ``infer`` raises ``ShapeError`` messages as ``ValueError``."""

    name: str
    hparams: dict[str, HP]
    infer: Callable[[dict[str, Any], list[TensorType]], TensorType]
    min_inputs: int = 1
    max_inputs: int = 1
    params: Callable[[dict[str, Any], list[TensorType]], ParamShapes] = lambda p, t: {}
    state: Callable[[dict[str, Any], list[TensorType]], ParamShapes] = lambda p, t: {}
    macs: Callable[[dict[str, Any], list[TensorType], TensorType], int] = lambda p, t, o: 0
    input_dtype: str = "float32"
    doc: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _rank(t: TensorType, ranks: tuple[int, ...], what: str) -> None:
    if len(t.shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeError(f"{what} needs an input of rank {want} (without batch), got shape {list(t.shape)}")


def _spatial(size: int, k: int, s: int, padding: str, what: str) -> int:
    out = math.ceil(size / s) if padding == "same" else (size - k) // s + 1
    if out < 1:
        raise ShapeError(f"{what}: window {k} with stride {s} does not fit an axis of size {size}")
    return out


def _conv2d_out(p: dict[str, Any], t: list[TensorType], filters: int, what: str) -> TensorType:
    _rank(t[0], (3,), what)
    h, w, _ = t[0].shape
    (kh, kw), (sh, sw) = p["kernel_size"], p["strides"]
    pad = p["padding"]
    return TensorType((_spatial(h, kh, sh, pad, what), _spatial(w, kw, sw, pad, what), filters))


def _conv_params(kernel: Shape, out: int, bias: bool) -> ParamShapes:
    return {"kernel": kernel, "bias": (out,)} if bias else {"kernel": kernel}


def _pool(rank: int, what: str) -> Callable[[dict[str, Any], list[TensorType]], TensorType]:
    def infer(p: dict[str, Any], t: list[TensorType]) -> TensorType:
        _rank(t[0], (rank + 1,), what)
        size = pool_window(p)
        strides = pool_strides(p)
        dims = [_spatial(n, k, s, p["padding"], what) for n, k, s in zip(t[0].shape, size, strides, strict=False)]
        return TensorType((*dims, t[0].shape[-1]))

    return infer


def pool_window(p: dict[str, Any]) -> list[int]:
    """Return a pooling node's window as a list (one entry per spatial axis)."""
    size = p["pool_size"]
    return list(size) if isinstance(size, list) else [size]


def pool_strides(p: dict[str, Any]) -> list[int]:
    """Return a pooling node's strides as a list; missing strides equal the window."""
    strides = p["strides"]
    if strides is None:
        return pool_window(p)
    return list(strides) if isinstance(strides, list) else [strides]


def _same(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    return t[0]


def _dense(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    _rank(t[0], (1, 2), "dense")
    return TensorType((*t[0].shape[:-1], p["units"]))


def _conv1d(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    _rank(t[0], (2,), "conv1d")
    length = _spatial(t[0].shape[0], p["kernel_size"], p["strides"], p["padding"], "conv1d")
    return TensorType((length, p["filters"]))


def _ids(t: TensorType, what: str) -> int:
    """The number of token ids of an int32 ``[L]`` input."""
    if t.dtype != "int32":
        raise ShapeError(f"{what} needs integer token ids (input dtype int32)")
    _rank(t, (1,), what)
    return t.shape[0]


def _embedding(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    length = _ids(t[0], "embedding")
    if p["length"] is not None and p["length"] > length:
        raise ShapeError(f"embedding: length {p['length']} exceeds the {length} token ids of its input")
    return TensorType((p["length"] or length, p["dim"]))


def _embedding_bag(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    if p["start"] >= _ids(t[0], "embedding_bag"):
        raise ShapeError(f"embedding_bag: start {p['start']} leaves no token ids of its input of {t[0].shape[0]}")
    if p["lowest"] >= p["vocab_size"]:
        raise ShapeError(f"embedding_bag: lowest id {p['lowest']} leaves no ids of its vocabulary of {p['vocab_size']}")
    return TensorType((p["dim"],))


def _global_pool(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    _rank(t[0], (2, 3), "global pooling")
    return TensorType((t[0].shape[-1],))


def _flatten(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    return TensorType((math.prod(t[0].shape),))


def _add(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    if any(x.shape != t[0].shape for x in t):
        raise ShapeError(f"add needs inputs of one shape, got {[list(x.shape) for x in t]}")
    return t[0]


def _concat(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    if any(x.shape[:-1] != t[0].shape[:-1] for x in t):
        raise ShapeError(f"concat needs inputs equal but for the last axis, got {[list(x.shape) for x in t]}")
    return TensorType((*t[0].shape[:-1], sum(x.shape[-1] for x in t)))


def _attention(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    _rank(t[0], (2,), "self_attention")
    if t[0].shape[1] % p["num_heads"]:
        raise ShapeError(f"self_attention: model dim {t[0].shape[1]} is not divisible by num_heads {p['num_heads']}")
    return t[0]


def _positional(p: dict[str, Any], t: list[TensorType]) -> TensorType:
    _rank(t[0], (2,), "position_embedding")
    return t[0]


def _attention_params(p: dict[str, Any], t: list[TensorType]) -> ParamShapes:
    d = t[0].shape[1]
    h = p["num_heads"]
    proj = {"kernel": (d, h, d // h), "bias": (h, d // h)}
    return {"query": proj, "key": proj, "value": proj, "out": {"kernel": (h, d // h, d), "bias": (d,)}}


def _conv2d_macs(p: dict[str, Any], t: list[TensorType], o: TensorType) -> int:
    kh, kw = p["kernel_size"]
    return int(o.shape[0] * o.shape[1] * kh * kw * t[0].shape[2] * p["filters"])


def _depthwise_macs(p: dict[str, Any], t: list[TensorType], o: TensorType) -> int:
    kh, kw = p["kernel_size"]
    return int(o.shape[0] * o.shape[1] * kh * kw * t[0].shape[2] * p["depth_multiplier"])


def _separable_macs(p: dict[str, Any], t: list[TensorType], o: TensorType) -> int:
    mid = t[0].shape[2] * p["depth_multiplier"]
    return _depthwise_macs(p, t, o) + int(o.shape[0] * o.shape[1] * mid * p["filters"])


def _attention_macs(p: dict[str, Any], t: list[TensorType], o: TensorType) -> int:
    length, d = t[0].shape
    return 4 * length * d * d + 2 * length * length * d


_CONV2D = {"kernel_size": HP("pair", 3, lo=1), "strides": HP("pair", 1, lo=1), "padding": PADDING, "use_bias": BIAS}
_VALID = HP("choice", "valid", choices=("valid",))
_POOL2D = {"pool_size": HP("pair", 2, lo=1), "strides": HP("pair", None, lo=1), "padding": _VALID}
_POOL1D = {"pool_size": HP("int", 2, lo=1), "strides": HP("int_or_none", None, lo=1), "padding": _VALID}
_UNIT = HP("float", 0.9, lo=0.0, hi=1.0, hi_open=True)
_MANY = 64

OPS: dict[str, OpDef] = {o.name: o for o in [
    OpDef("conv2d", {"filters": HP("int", lo=1), **_CONV2D},
          lambda p, t: _conv2d_out(p, t, p["filters"], "conv2d"),
          params=lambda p, t: _conv_params((*p["kernel_size"], t[0].shape[2], p["filters"]), p["filters"],
                                           p["use_bias"]),
          macs=_conv2d_macs, doc="2-D convolution, channels-last"),
    OpDef("depthwise_conv2d", {"depth_multiplier": HP("int", 1, lo=1), **_CONV2D},
          lambda p, t: _conv2d_out(p, t, t[0].shape[-1] * p["depth_multiplier"], "depthwise_conv2d"),
          params=lambda p, t: _conv_params((*p["kernel_size"], 1, t[0].shape[2] * p["depth_multiplier"]),
                                           t[0].shape[2] * p["depth_multiplier"], p["use_bias"]),
          macs=_depthwise_macs, doc="per-channel 2-D convolution"),
    OpDef("separable_conv2d", {"filters": HP("int", lo=1), "depth_multiplier": HP("int", 1, lo=1), **_CONV2D},
          lambda p, t: _conv2d_out(p, t, p["filters"], "separable_conv2d"),
          params=lambda p, t: {
              "depthwise": {"kernel": (*p["kernel_size"], 1, t[0].shape[2] * p["depth_multiplier"])},
              "pointwise": _conv_params((1, 1, t[0].shape[2] * p["depth_multiplier"], p["filters"]),
                                        p["filters"], p["use_bias"])},
          macs=_separable_macs, doc="depthwise then 1x1 convolution"),
    OpDef("conv1d", {"filters": HP("int", lo=1), "kernel_size": HP("int", 3, lo=1), "strides": HP("int", 1, lo=1),
                     "padding": PADDING, "use_bias": BIAS}, _conv1d,
          params=lambda p, t: _conv_params((p["kernel_size"], t[0].shape[1], p["filters"]), p["filters"],
                                           p["use_bias"]),
          macs=lambda p, t, o: o.shape[0] * p["kernel_size"] * t[0].shape[1] * p["filters"],
          doc="1-D convolution over [L, C]"),
    OpDef("dense", {"units": HP("int", lo=1), "use_bias": BIAS}, _dense,
          params=lambda p, t: _conv_params((t[0].shape[-1], p["units"]), p["units"], p["use_bias"]),
          macs=lambda p, t, o: math.prod(t[0].shape) * p["units"], doc="fully connected, on the last axis"),
    OpDef("embedding", {"vocab_size": HP("int", lo=1), "dim": HP("int", lo=1), "length": HP("int_or_none", None, lo=1)},
          _embedding, params=lambda p, t: {"embedding": (p["vocab_size"], p["dim"])}, input_dtype="int32",
          doc="token ids [L] (the first `length` of them, when set) to vectors [length, dim]; ids outside the "
              "vocabulary map to zero vectors"),
    OpDef("embedding_bag", {"vocab_size": HP("int", lo=1), "dim": HP("int", lo=1), "start": HP("int", 0, lo=0),
                            "norm": HP("choice", "sqrt", choices=BAG_NORMS), "lowest": HP("int", 1, lo=1)},
          _embedding_bag, params=lambda p, t: {"embedding": (p["vocab_size"], p["dim"])}, input_dtype="int32",
          macs=lambda p, t, o: (t[0].shape[0] - p["start"]) * p["dim"],
          doc="the vectors of token ids [start:] summed, over their count (`mean`), its square root (`sqrt`) or 1 "
              "(`sum`) -> [dim]; ids below `lowest` (0, padding, by default) and ids outside the vocabulary are left "
              "out, as in PyTorch's EmbeddingBag with padding_idx=0; a `lowest` above 1 reads one block of ids"),
    OpDef("max_pool2d", _POOL2D, _pool(2, "max_pool2d"), doc="2-D max pooling"),
    OpDef("avg_pool2d", _POOL2D, _pool(2, "avg_pool2d"), doc="2-D average pooling"),
    OpDef("max_pool1d", _POOL1D, _pool(1, "max_pool1d"), doc="1-D max pooling"),
    OpDef("avg_pool1d", _POOL1D, _pool(1, "avg_pool1d"), doc="1-D average pooling"),
    OpDef("global_avg_pool", {}, _global_pool, doc="mean over all spatial axes"),
    OpDef("global_max_pool", {}, _global_pool, doc="max over all spatial axes"),
    OpDef("batch_norm", {"momentum": _UNIT, "epsilon": HP("float", 1e-5, lo=1e-12)},
          _same, params=lambda p, t: {"scale": (t[0].shape[-1],), "bias": (t[0].shape[-1],)},
          state=lambda p, t: {"mean": (t[0].shape[-1],), "var": (t[0].shape[-1],)},
          doc="batch normalisation, last axis"),
    OpDef("layer_norm", {"epsilon": HP("float", 1e-6, lo=1e-12)}, _same,
          params=lambda p, t: {"scale": (t[0].shape[-1],), "bias": (t[0].shape[-1],)},
          doc="layer normalisation, last axis"),
    OpDef("activation", {"fn": HP("choice", "relu", choices=ACTIVATIONS)}, _same,
          doc="element-wise non-linearity"),
    OpDef("dropout", {"rate": HP("float", 0.5, lo=0.0, hi=1.0, hi_open=True)}, _same,
          doc="dropout (training only)"),
    OpDef("flatten", {}, _flatten, doc="flatten to a vector"),
    OpDef("add", {}, _add, min_inputs=2, max_inputs=_MANY, doc="element-wise sum (residual connection)"),
    OpDef("concat", {}, _concat, min_inputs=2, max_inputs=_MANY,
          doc="concatenate on the last axis (dense connectivity)"),
    OpDef("self_attention", {"num_heads": HP("int", lo=1)}, _attention, params=_attention_params,
          macs=_attention_macs, doc="multi-head self-attention over [L, D]"),
    OpDef("position_embedding", {}, _positional, params=lambda p, t: {"embedding": t[0].shape},
          doc="adds a learned position embedding to [L, D]"),
]}
