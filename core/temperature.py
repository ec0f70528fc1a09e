"""Temperature scaling folded into a network's weights: the same graph computes logits divided by a temperature.

A network's logits are made by dense layers, summed where an ensemble's members meet; scaling those layers'
kernels and biases by ``1 / T`` divides the logits by ``T`` (temperature scaling: Guo et al., "On Calibration of
Modern Neural Networks", ICML 2017). So the calibrated probabilities come from every interface that runs the weights
(the native model, its ONNX export, the predict endpoint) with no extra node in the graph or the export format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from core.errors import SpecError
from core.spec import Spec

LINEAR_OPS = frozenset({"add", "dropout"})
"""Ops between the logits layers and the output that are linear at inference (dropout is the identity)."""


def logit_layers(spec: Spec) -> list[str]:
    """The dense layers whose outputs sum to `spec`'s output, through :data:`LINEAR_OPS`; SpecError where
    something else makes the output (the logits would not scale with the weights)."""
    found: list[str] = []
    stack = [spec.output]
    while stack:
        node = spec.node(stack.pop())
        if node.op in LINEAR_OPS:
            stack.extend(node.inputs)
        elif node.op == "dense":
            if node.id not in found:
                found.append(node.id)
        else:
            raise SpecError(f"the output is made by {node.op!r} node {node.id!r}, not by dense layers and sums")
    return found


def scale_logits(spec: Spec, variables: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """`variables` with every logits layer's kernel and bias multiplied by `factor`, so the network's logits are
    multiplied by it (a new tree; `variables` is not changed)."""
    params = dict(variables["params"])
    for layer in logit_layers(spec):
        params[layer] = {k: (np.asarray(v) * factor).astype(np.asarray(v).dtype) if k in ("kernel", "bias") else v
                         for k, v in params[layer].items()}
    return {**variables, "params": params}
