"""Small specs for the core.model tests: the input shapes they use, and a spec of any nodes under a dense head."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from core.graph import validate
from core.model import build
from core.spec import INPUT, InputSpec, Node, Spec

IMAGE = InputSpec((7, 7, 2))
SEQ = InputSpec((6, 4), modality="tabular")
VEC = InputSpec((5,), modality="tabular")
TEXT = InputSpec((6,), dtype="int32", modality="text")
CLASSES = 3


def spec(inp: InputSpec, nodes: list[Node], last: str, *, units: int = CLASSES) -> Spec:
    """Wrap ``nodes`` (reading ``input``) with a flatten and a dense head over ``last``."""
    head = [Node("flat", "flatten", (last,)), Node("head", "dense", ("flat",), {"units": units})]
    return Spec(inp, (*nodes, *head), "head", units)


def node(node_id: str, op: str, inputs: tuple[str, ...] = (INPUT,), **params: Any) -> Node:
    """One node reading ``inputs`` (default: the network's input)."""
    return Node(node_id, op, inputs, params)


def probe(inp: InputSpec, nodes: list[Node], last: str) -> tuple[Any, Any]:
    """Return (model, variables) whose logits are ``last``'s output flattened (identity head)."""
    size = math.prod(validate(spec(inp, nodes, last)).types[last].shape)
    model = build(spec(inp, nodes, last, units=size))
    variables = model.init(jax.random.key(0))
    variables["params"]["head"] = {"kernel": jnp.eye(size), "bias": jnp.zeros(size)}
    return model, variables
