"""The JSON Schema of the network spec, generated from the op table.

The published copy lives beside this module as ``spec.schema.json``; regenerate it with
``python -m core.schema > core/spec.schema.json`` after changing an op (a test checks they agree).
The schema checks structure and hyper-parameter types; graph rules (cycles, shapes) need
:func:`core.graph.validate`.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from core.op_params import REQUIRED
from core.ops import OPS
from core.spec import DTYPES, FORMAT, ID_PATTERN, INPUT, MODALITIES, VERSION

SCHEMA_ID = "https://netsynth.dev/schemas/spec-v1.json"
_NONZERO: dict[str, Any] = {"type": "number", "not": {"const": 0}}


def _node_schema(op: str) -> dict[str, Any]:
    definition = OPS[op]
    required = sorted(n for n, hp in definition.hparams.items() if hp.default is REQUIRED)
    props = {name: {**hp.json_schema(), **({"default": hp.default} if name not in required else {})}
             for name, hp in definition.hparams.items()}
    params: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        params["required"] = required
    inputs: dict[str, Any] = {"type": "array", "items": {"type": "string"}, "minItems": definition.min_inputs}
    if definition.max_inputs == definition.min_inputs:
        inputs["maxItems"] = definition.max_inputs
    node: dict[str, Any] = {
        "type": "object",
        "description": definition.doc,
        "properties": {
            "id": {"type": "string", "pattern": ID_PATTERN, "not": {"const": INPUT}},
            "op": {"const": op},
            "inputs": inputs,
            "params": params,
        },
        "required": ["id", "op", "inputs", *(["params"] if required else [])],
        "additionalProperties": False,
    }
    return node


def json_schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of a version-1 netsynth spec."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "netsynth network spec",
        "description": "A neural network as a directed acyclic graph of typed nodes.",
        "type": "object",
        "properties": {
            "format": {"const": FORMAT},
            "version": {"const": VERSION},
            "name": {"type": "string"},
            "input": {
                "type": "object",
                "properties": {
                    "shape": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
                    "dtype": {"enum": list(DTYPES), "default": "float32"},
                    "modality": {"enum": list(MODALITIES), "default": "image"},
                    "scale": {"oneOf": [_NONZERO, {"type": "array", "items": _NONZERO, "minItems": 1}],
                              "default": 1.0, "description": "one factor, or one per channel (last axis)"},
                    "offset": {"oneOf": [{"type": "number"},
                                         {"type": "array", "items": {"type": "number"}, "minItems": 1}],
                               "default": 0.0, "description": "one term, or one per channel (last axis)"},
                },
                "required": ["shape"],
                "additionalProperties": False,
            },
            "nodes": {"type": "array", "items": {"oneOf": [{"$ref": f"#/$defs/{op}"} for op in sorted(OPS)]}},
            "output": {
                "type": "object",
                "properties": {"node": {"type": "string"}, "num_classes": {"type": "integer", "minimum": 2}},
                "required": ["node", "num_classes"],
                "additionalProperties": False,
            },
        },
        "required": ["input", "nodes", "output"],
        "additionalProperties": False,
        "$defs": {op: _node_schema(op) for op in sorted(OPS)},
    }


def published_schema() -> dict[str, Any]:
    """Return the schema file shipped with the package (``core/spec.schema.json``)."""
    text = resources.files("core").joinpath("spec.schema.json").read_text(encoding="utf-8")
    result: dict[str, Any] = json.loads(text)
    return result


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))
