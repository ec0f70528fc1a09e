"""ONNX converters of the token ops (embedding, embedding_bag, position_embedding), mirroring core.model."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from core.onnx_builder import Builder, Params
from core.ops import TensorType
from core.spec import Node


def _vectors(b: Builder, n: Node, ids: str, lowest: int, p: Params, out: str) -> tuple[str, str]:
    """The table rows of ``ids`` ([N, L, D], named ``out``), zeroed where an id is below ``lowest`` or outside
    the vocabulary, and the float mask of the kept ids ([N, L, 1])."""
    zero = b.const(f"{n.id}/zero", 0, np.int32)
    above = b.op("GreaterOrEqual", [ids, b.const(f"{n.id}/lowest", lowest, np.int32)], f"{n.id}/ge")
    below = b.op("Less", [ids, b.const(f"{n.id}/vocab", n.params["vocab_size"], np.int32)], f"{n.id}/lt")
    valid = b.op("And", [above, below], f"{n.id}/valid")
    safe = b.op("Where", [valid, ids, zero], f"{n.id}/ids")
    table = b.const(f"{n.id}/table", p["embedding"])
    vectors = b.op("Gather", [table, safe], f"{n.id}/gather", axis=0)
    axes = b.const(f"{n.id}/axes", [-1], np.int64)
    keep = b.op("Cast", [b.op("Unsqueeze", [valid, axes], f"{n.id}/valid3")], f"{n.id}/keep",
                to=TensorProto.FLOAT)
    return b.op("Mul", [vectors, keep], out), keep


def _positions(b: Builder, n: Node, ids: str, start: int, stop: int) -> str:
    """Token ids ``[:, start:stop]``."""
    bounds = [b.const(f"{n.id}/{k}", [v], np.int64) for k, v in (("starts", start), ("ends", stop), ("axes", 1))]
    return b.op("Slice", [ids, *bounds], f"{n.id}/slice")


def embedding(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Table lookup of the first ``length`` ids; ids outside ``[0, vocab_size)`` read row 0 and are then zeroed."""
    length, ids = n.params["length"], xs[0]
    if length is not None and length < ts[0].shape[0]:
        ids = _positions(b, n, ids, 0, length)
    return _vectors(b, n, ids, 0, p, n.id)[0]


def embedding_bag(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """The sum of the kept ids' rows (ids ``[start:]``; ids below ``lowest`` and outside the vocabulary left out)
    over its norm."""
    ids = _positions(b, n, xs[0], n.params["start"], ts[0].shape[0])
    vectors, keep = _vectors(b, n, ids, n.params["lowest"], p, f"{n.id}/vectors")
    axis = b.const(f"{n.id}/bag_axis", [1], np.int64)  # ReduceSum takes its axes as an input from opset 13
    total = b.op("ReduceSum", [vectors, axis], f"{n.id}/sum", keepdims=0)
    count = b.op("ReduceSum", [keep, axis], f"{n.id}/count", keepdims=0)  # [N, 1]
    norm = n.params["norm"]
    if norm == "sum":
        return b.op("Identity", [total], n.id)
    if norm == "sqrt":
        count = b.op("Sqrt", [count], f"{n.id}/sqrt")
    return b.op("Div", [total, b.op("Max", [count, b.const(f"{n.id}/one", 1.0)], f"{n.id}/divisor")], n.id)


def position_embedding(b: Builder, n: Node, xs: list[str], ts: list[TensorType], p: Params) -> str:
    """Adds the learned ``[L, D]`` table to every example."""
    return b.op("Add", [xs[0], b.const(f"{n.id}/embedding", p["embedding"])], n.id)
