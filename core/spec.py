"""The network spec: netsynth's versioned, human-readable model format.

A spec is a JSON document describing the input (shape without the batch axis, dtype, modality), a
directed acyclic graph of typed nodes with their hyper-parameters, and the output (the node that
yields the logits and the number of classes). Images are channels-last (``[H, W, C]``); text is a
sequence of integer token ids (``[L]``).

Example::

    {"format": "netsynth.spec", "version": 1, "name": "tiny",
     "input": {"shape": [28, 28, 1], "dtype": "float32", "modality": "image"},
     "nodes": [{"id": "flat", "op": "flatten", "inputs": ["input"]},
               {"id": "logits", "op": "dense", "inputs": ["flat"], "params": {"units": 10}}],
     "output": {"node": "logits", "num_classes": 10}}

``Spec.from_json`` checks the document's structure only; :func:`core.graph.validate` checks the
graph and infers shapes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from core.errors import SchemaError

FORMAT = "netsynth.spec"
VERSION = 1
INPUT = "input"
"""The reserved name by which nodes read the network's input."""

ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
"""Node ids: letters, digits, '_', '.', '-' (no '/', which separates flat parameter paths)."""
MODALITIES = ("image", "text", "tabular")
DTYPES = ("float32", "int32")
Affine = float | tuple[float, ...]
"""An input's scale or offset: one number for every element, or one per channel (the last axis)."""


@dataclass(frozen=True)
class InputSpec:
    """The network's input: shape without the batch axis, element dtype and modality.

    Float inputs are first mapped to ``x * scale + offset`` inside the network, so that a model
    (and its ONNX export) takes raw values, e.g. pixels 0-255 with ``scale = 1/255``. ``scale`` and
    ``offset`` are each one number or a tuple of one number per channel (the last axis of ``shape``),
    e.g. per-channel standardisation ``scale = 1/std``, ``offset = -mean/std``.
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    modality: str = "image"
    scale: Affine = 1.0
    offset: Affine = 0.0

    def __post_init__(self) -> None:
        for key in ("scale", "offset"):
            value = getattr(self, key)
            if isinstance(value, tuple) and len(value) != self.shape[-1]:
                raise SchemaError(f"input.{key} has {len(value)} values; the input has {self.shape[-1]} channels "
                                  "(its shape's last axis)")


@dataclass(frozen=True)
class Node:
    """One operation of the graph: a unique id, an op name, the ids it reads and its hyper-parameters."""

    id: str
    op: str
    inputs: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)

    def with_params(self, **changes: Any) -> Node:
        """Return a copy of this node with some hyper-parameters changed."""
        return replace(self, params={**self.params, **changes})


@dataclass(frozen=True)
class Spec:
    """A whole network: input, nodes (in any order) and the output node with its class count."""

    input: InputSpec
    nodes: tuple[Node, ...]
    output: str
    num_classes: int
    name: str = "network"

    def node(self, node_id: str) -> Node:
        """Return the node called ``node_id`` (``KeyError`` when there is none)."""
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    def consumers(self, node_id: str) -> list[Node]:
        """Return the nodes that read ``node_id``'s output."""
        return [n for n in self.nodes if node_id in n.inputs]

    def replace_node(self, node: Node) -> Spec:
        """Return a copy of the spec with the node of the same id swapped for ``node``."""
        return replace(self, nodes=tuple(node if n.id == node.id else n for n in self.nodes))

    def to_dict(self) -> dict[str, Any]:
        """Return the spec as a JSON-ready dictionary."""
        nodes: list[dict[str, Any]] = []
        for n in self.nodes:
            entry: dict[str, Any] = {"id": n.id, "op": n.op, "inputs": list(n.inputs)}
            if n.params:
                entry["params"] = _jsonable(n.params)
            nodes.append(entry)
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "input": {
                "shape": list(self.input.shape),
                "dtype": self.input.dtype,
                "modality": self.input.modality,
                "scale": _affine_json(self.input.scale),
                "offset": _affine_json(self.input.offset),
            },
            "nodes": nodes,
            "output": {"node": self.output, "num_classes": self.num_classes},
        }

    def to_json(self, indent: int | None = 2) -> str:
        """Return the spec as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, doc: Any) -> Spec:
        """Build a spec from a parsed JSON document, raising :class:`SchemaError` on bad structure."""
        if not isinstance(doc, dict):
            raise SchemaError("a spec must be a JSON object")
        if doc.get("format", FORMAT) != FORMAT:
            raise SchemaError(f"'format' must be '{FORMAT}', got {doc.get('format')!r}")
        version = doc.get("version", VERSION)
        if version != VERSION:
            raise SchemaError(f"unsupported spec version {version!r}; this netsynth reads {VERSION}")
        _only_keys(doc, {"format", "version", "name", "input", "nodes", "output"}, "spec")
        inp = _require(doc, "input", dict, "spec")
        _only_keys(inp, {"shape", "dtype", "modality", "scale", "offset"}, "input")
        shape = _require(inp, "shape", list, "input")
        if not shape or not all(_is_int(s) and s > 0 for s in shape):
            raise SchemaError(f"input.shape must be a non-empty list of positive ints, got {shape!r}")
        dtype = inp.get("dtype", "float32")
        modality = inp.get("modality", "image")
        if dtype not in DTYPES:
            raise SchemaError(f"input.dtype must be one of {DTYPES}, got {dtype!r}")
        if modality not in MODALITIES:
            raise SchemaError(f"input.modality must be one of {MODALITIES}, got {modality!r}")
        scale = _affine_from(inp.get("scale", 1.0), "scale", shape[-1])
        offset = _affine_from(inp.get("offset", 0.0), "offset", shape[-1])
        raw_nodes = _require(doc, "nodes", list, "spec")
        nodes = tuple(_node_from_dict(i, n) for i, n in enumerate(raw_nodes))
        out = _require(doc, "output", dict, "spec")
        _only_keys(out, {"node", "num_classes"}, "output")
        out_node = _require(out, "node", str, "output")
        num_classes = out.get("num_classes")
        if not _is_int(num_classes) or num_classes < 2:
            raise SchemaError(f"output.num_classes must be an int >= 2, got {num_classes!r}")
        name = doc.get("name", "network")
        if not isinstance(name, str):
            raise SchemaError("'name' must be a string")
        input_spec = InputSpec(tuple(shape), dtype, modality, scale, offset)
        return cls(input_spec, nodes, out_node, num_classes, name)

    @classmethod
    def from_json(cls, text: str | bytes) -> Spec:
        """Parse JSON text into a spec, raising :class:`SchemaError` on malformed input."""
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SchemaError(f"not valid JSON: {exc}") from exc
        return cls.from_dict(doc)


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _affine_from(value: Any, key: str, channels: int) -> Affine:
    """A scale or offset read from JSON: a finite number, or a list (or tuple) of one finite number per channel
    (a scale holds no 0)."""
    per_channel = isinstance(value, list | tuple)
    values = list(value) if per_channel else [value]
    if not values or not all(_is_number(v) for v in values):
        raise SchemaError(f"input.{key} must be a finite number or a list of them, got {value!r}")
    if per_channel and len(values) != channels:
        raise SchemaError(f"input.{key} has {len(values)} values; the input has {channels} channels "
                          "(its shape's last axis)")
    if key == "scale" and any(v == 0 for v in values):
        raise SchemaError("input.scale must not be 0")
    return tuple(float(v) for v in values) if per_channel else float(value)


def _affine_json(value: Affine) -> float | list[float]:
    return list(value) if isinstance(value, tuple) else value


def _node_from_dict(index: int, raw: Any) -> Node:
    where = f"nodes[{index}]"
    if not isinstance(raw, dict):
        raise SchemaError(f"{where} must be an object")
    _only_keys(raw, {"id", "op", "inputs", "params"}, where)
    node_id = _require(raw, "id", str, where)
    if node_id == INPUT or not re.fullmatch(ID_PATTERN, node_id):
        raise SchemaError(f"{where}.id must match {ID_PATTERN} and not be '{INPUT}', got {node_id!r}",
                          node_id or None)
    op = _require(raw, "op", str, where)
    inputs = _require(raw, "inputs", list, where)
    if not all(isinstance(i, str) for i in inputs):
        raise SchemaError("'inputs' must be a list of node ids", node_id)
    params = raw.get("params", {})
    if not isinstance(params, dict):
        raise SchemaError("'params' must be an object", node_id)
    return Node(node_id, op, tuple(inputs), dict(params))


def _require(doc: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in doc:
        raise SchemaError(f"{where} is missing '{key}'")
    value = doc[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SchemaError(f"{where}.{key} must be of type {kind.__name__}")
    return value


def _only_keys(doc: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(doc) - allowed)
    if extra:
        raise SchemaError(f"{where} has unknown keys {extra}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
