"""Export a network to ONNX, built directly from the spec graph (no tracing of JAX).

The graph reads ``input`` ``[batch, *spec.input.shape]`` (float32, or int32 token ids) with a
symbolic batch axis, applies the spec's ``x * scale + offset`` (per channel when the spec gives
one value per channel) to float inputs, and yields ``logits`` ``[batch, num_classes]`` and their
``probabilities`` (softmax). Activations stay channels-last as in :mod:`core.model`; see
:mod:`core.onnx_ops` for the per-op converters.
Parameters are embedded as float32 initialisers; pruned or shared parameters are exported as
their dense values.

Reference: ONNX IR and operators, https://onnx.ai/onnx/.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from core import tree
from core.checkpoint import flat_variables
from core.errors import CheckpointError
from core.graph import Graph, validate
from core.onnx_builder import Builder
from core.onnx_ops import CONVERTERS
from core.reparam import Reparam
from core.spec import INPUT, Spec

INPUT_NAME, LOGITS, PROBABILITIES = "input", "logits", "probabilities"
"""Tensor names of an exported network's input and outputs: the interface `domain.onnx_run` runs (it names them
again, since the engine imports nothing of ours; the export tests run every export through it)."""

MIN_OPSET = 17
DEFAULT_OPSET = 17
MAX_OPSET = 22
"""Opsets the exporter supports; onnxruntime 1.31 runs all of them."""

BATCH = "batch"
SPEC_KEY = "netsynth.spec"
"""Key of the model metadata entry that holds the spec JSON."""


def export_onnx(spec: Spec | Graph, variables: dict[str, Any], *, reparam: Reparam | None = None,
                opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """Return the ONNX model computing the same logits as ``core.model.build(spec).apply``.

    ``variables`` are the model's dense variables (``{"params", "batch_stats"}``); when a
    ``reparam`` is given its masks are applied to them first. Raises ``ValueError`` for an
    unsupported opset and :class:`CheckpointError` when variables do not fit the spec.
    """
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be in [{MIN_OPSET}, {MAX_OPSET}], got {opset}")
    graph = spec if isinstance(spec, Graph) else validate(spec)
    params, stats = _dense_variables(graph, variables, reparam)
    b = Builder(opset, reserved=(INPUT_NAME, LOGITS, PROBABILITIES))
    inp = graph.spec.input
    is_int = inp.dtype == "int32"
    x = INPUT_NAME
    if not is_int and inp.scale != 1.0:  # a per-channel tuple broadcasts over the last axis
        x = b.op("Mul", [x, b.const("input/scale", inp.scale)], "input/scaled")
    if not is_int and inp.offset != 0.0:
        x = b.op("Add", [x, b.const("input/offset", inp.offset)], "input/shifted")
    values = {INPUT: x}
    for node in graph.order:
        node_vars = {**params.get(node.id, {}), **stats.get(node.id, {})}
        xs = [values[i] for i in node.inputs]
        values[node.id] = CONVERTERS[node.op](b, node, xs, graph.input_types(node), node_vars)
    b.nodes.append(helper.make_node("Identity", [values[graph.spec.output]], [LOGITS], name=LOGITS))
    b.nodes.append(helper.make_node("Softmax", [LOGITS], [PROBABILITIES], name=PROBABILITIES,
                                    axis=-1))
    elem = TensorProto.INT32 if is_int else TensorProto.FLOAT
    classes = graph.spec.num_classes
    onnx_graph = helper.make_graph(
        b.nodes, _safe_name(graph.spec.name),
        [helper.make_tensor_value_info(INPUT_NAME, elem, [BATCH, *inp.shape])],
        [helper.make_tensor_value_info(LOGITS, TensorProto.FLOAT, [BATCH, classes]),
         helper.make_tensor_value_info(PROBABILITIES, TensorProto.FLOAT, [BATCH, classes])],
        initializer=b.initializers)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="netsynth",
                              ir_version=helper.find_min_ir_version_for(opsets))
    helper.set_model_props(model, {SPEC_KEY: graph.spec.to_json(indent=None)})
    onnx.checker.check_model(model, full_check=True)
    return model


def to_onnx_bytes(spec: Spec | Graph, variables: dict[str, Any], *, reparam: Reparam | None = None,
                  opset: int = DEFAULT_OPSET) -> bytes:
    """Return :func:`export_onnx`'s model serialised (an ``.onnx`` file's content)."""
    return bytes(export_onnx(spec, variables, reparam=reparam, opset=opset).SerializeToString())


def _dense_variables(graph: Graph, variables: dict[str, Any], reparam: Reparam | None
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (params, batch_stats) as nested float32 numpy arrays, masks applied."""
    dense = flat_variables(graph, variables)
    flat = {p: np.asarray(a, np.float32) for p, a in dense["params"].items()}
    for path, mask in (reparam.masks.items() if reparam is not None else ()):
        if path not in flat or np.shape(mask) != flat[path].shape:
            raise CheckpointError(f"mask '{path}' does not fit a parameter of the model")
        flat[path] = np.where(np.asarray(mask) != 0, flat[path], np.float32(0))
    stats = {p: np.asarray(a, np.float32) for p, a in dense["batch_stats"].items()}
    return tree.unflatten(flat), tree.unflatten(stats)


def _safe_name(name: str) -> str:
    return name or "network"
