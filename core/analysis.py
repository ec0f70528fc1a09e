"""Static analysis of a spec, without running anything: size, compute and memory, and the layer-by-layer
architecture a model is stored with.

References: multiply-adds counted as in Howard et al., *MobileNets* (2017), one MAC per
multiply-accumulate of a convolution, dense layer or attention product; element-wise ops count 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.graph import Graph, validate
from core.ops import OPS
from core.spec import Spec

BYTES_PER_FLOAT32 = 4
SAFETENSORS_HEADER_BYTES_PER_TENSOR = 96
"""Rough per-tensor overhead of the safetensors header (name, dtype, shape, offsets in JSON)."""


@dataclass(frozen=True)
class NodeCost:
    """Static figures of one node: parameter and state counts, MACs per example, output elements."""

    node: str
    op: str
    params: int
    state: int
    macs: int
    output_elements: int
    tensors: int


@dataclass(frozen=True)
class Analysis:
    """Static figures of a whole network, per example unless stated otherwise."""

    nodes: tuple[NodeCost, ...]
    params: int
    state: int
    macs: int
    activation_elements: int
    bytes_on_disk: int

    def activation_bytes(self, batch_size: int, bytes_per_element: int = BYTES_PER_FLOAT32) -> int:
        """Return the memory that all activations of a batch take (held at once during training)."""
        return self.activation_elements * batch_size * bytes_per_element

    def flops(self, batch_size: int = 1) -> int:
        """Return forward floating-point operations for a batch (2 per multiply-add)."""
        return 2 * self.macs * batch_size


def _count(shapes: Any) -> tuple[int, int]:
    """Return (number of scalars, number of tensors) in a nested dict of shapes."""
    if isinstance(shapes, dict):
        totals = [_count(v) for v in shapes.values()]
        return sum(t[0] for t in totals), sum(t[1] for t in totals)
    return math.prod(shapes), 1


def analyse(spec: Spec | Graph, spec_json_bytes: int | None = None) -> Analysis:
    """Return parameter count, MACs, activation size and on-disk bytes of a network.

    ``bytes_on_disk`` estimates a saved model (float32 weights and state, the spec JSON and the
    safetensors header), as written by :mod:`core.checkpoint` without compression.
    """
    graph = spec if isinstance(spec, Graph) else validate(spec)
    costs: list[NodeCost] = []
    for node in graph.order:
        op = OPS[node.op]
        ins = graph.input_types(node)
        out = graph.types[node.id]
        n_params, t_params = _count(op.params(node.params, ins))
        n_state, t_state = _count(op.state(node.params, ins))
        costs.append(NodeCost(node.id, node.op, n_params, n_state, op.macs(node.params, ins, out),
                              math.prod(out.shape), t_params + t_state))
    params = sum(c.params for c in costs)
    state = sum(c.state for c in costs)
    json_bytes = spec_json_bytes if spec_json_bytes is not None else len(graph.spec.to_json().encode())
    disk = ((params + state) * BYTES_PER_FLOAT32 + json_bytes
            + SAFETENSORS_HEADER_BYTES_PER_TENSOR * sum(c.tensors for c in costs))
    activations = math.prod(graph.spec.input.shape) + sum(c.output_elements for c in costs)
    return Analysis(tuple(costs), params, state, sum(c.macs for c in costs), activations, disk)


def architecture(spec: Spec | Graph) -> dict[str, Any]:
    """The network as a list of its layers in the order they compute (JSON-ready, as a trained model is stored with
    it): ``input_shape``, then per layer its ``name``, ``op``, ``output_shape`` (without the batch axis), trainable
    ``params`` and the ``inputs`` it reads (``"input"`` being the network's input)."""
    graph = spec if isinstance(spec, Graph) else validate(spec)
    params = {cost.node: cost.params for cost in analyse(graph).nodes}
    return {"input_shape": list(graph.spec.input.shape), "layers": [
        {"name": node.id, "op": node.op, "output_shape": list(graph.types[node.id].shape), "params": params[node.id],
         "inputs": list(node.inputs)} for node in graph.order]}
