"""The ONNX graph builder the converters write into, and the converter signature."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from core.ops import TensorType
from core.spec import Node

Params = dict[str, Any]
Converter = Callable[["Builder", Node, list[str], list[TensorType], Params], str]
"""``(builder, node, input names, input types, numpy params) -> output name``."""


class Builder:
    """Collects the nodes and initialisers of an ONNX graph, naming tensors uniquely."""

    def __init__(self, opset: int, reserved: tuple[str, ...] = ()) -> None:
        self.opset = opset
        self.nodes: list[NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._taken: set[str] = set(reserved)

    def name(self, hint: str) -> str:
        """Return an unused tensor name derived from ``hint``."""
        name, i = hint, 1
        while name in self._taken:
            name, i = f"{hint}_{i}", i + 1
        self._taken.add(name)
        return name

    def const(self, hint: str, value: Any, dtype: Any = np.float32) -> str:
        """Add an initialiser holding ``value`` (cast to ``dtype``) and return its name."""
        name = self.name(hint)
        array = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str, **attrs: Any) -> str:
        """Add one node with a single output and return the output's name."""
        out = self.name(hint)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def reduce(self, op_type: str, x: str, axes: list[int], hint: str) -> str:
        """Reduce over ``axes`` without keeping them (axes moved to an input in opset 18)."""
        if self.opset >= 18:
            axes_input = self.const(f"{hint}/axes", axes, np.int64)
            return self.op(op_type, [x, axes_input], hint, keepdims=0)
        return self.op(op_type, [x], hint, axes=axes, keepdims=0)
