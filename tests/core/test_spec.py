"""The spec document: JSON round trip, structural errors, published JSON Schema."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from core.errors import SchemaError
from core.schema import json_schema, published_schema
from core.spec import Spec
from tests.core.specs import reference_cnn_doc


def test_json_round_trip_is_lossless() -> None:
    spec = Spec.from_dict(reference_cnn_doc())
    again = Spec.from_json(spec.to_json())
    assert again == spec
    assert json.loads(again.to_json()) == json.loads(spec.to_json())


def test_document_is_readable_and_editable() -> None:
    text = Spec.from_dict(reference_cnn_doc()).to_json()
    assert '"op": "conv2d"' in text and "\n" in text
    edited = json.loads(text)
    edited["nodes"][0]["params"]["filters"] = 16
    assert Spec.from_dict(edited).node("conv1").params["filters"] == 16


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("nodes"), "missing 'nodes'"),
        (lambda d: d.update(version=2), "unsupported spec version"),
        (lambda d: d.update(format="onnx"), "'format' must be"),
        (lambda d: d["input"].update(shape=[]), "input.shape"),
        (lambda d: d["input"].update(shape=[28, -1]), "input.shape"),
        (lambda d: d["input"].update(dtype="float64"), "input.dtype"),
        (lambda d: d["input"].update(modality="audio"), "input.modality"),
        (lambda d: d["input"].update(scale=0), "input.scale"),
        (lambda d: d["input"].update(scale=float("inf")), "input.scale"),
        (lambda d: d["input"].update(offset=float("nan")), "input.offset"),
        (lambda d: d["input"].update(offset="0"), "input.offset"),
        (lambda d: d["output"].update(num_classes=1), "num_classes"),
        (lambda d: d.update(extra=1), "unknown keys"),
        (lambda d: d["nodes"][0].update(id="input"), "not be 'input'"),
        (lambda d: d["nodes"][0].update(id="conv/1"), "must match"),
        (lambda d: d["nodes"][0].update(id=""), "must match"),
        (lambda d: d["nodes"][0].update(inputs="input"), "inputs"),
        (lambda d: d["nodes"][0].update(params=[1]), "'params' must be an object"),
    ],
)
def test_structural_errors_are_schema_errors(mutate, message) -> None:
    doc = copy.deepcopy(reference_cnn_doc())
    mutate(doc)
    with pytest.raises(SchemaError, match=message):
        Spec.from_dict(doc)


def test_not_json_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="not valid JSON"):
        Spec.from_json("{nodes: [")
    with pytest.raises(SchemaError, match="JSON object"):
        Spec.from_json("[1, 2]")


def test_published_schema_is_current_and_valid() -> None:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert published_schema() == schema, "regenerate: python -m core.schema > core/spec.schema.json"


def test_schema_accepts_specs_and_rejects_bad_hyper_parameters() -> None:
    validator = jsonschema.Draft202012Validator(json_schema())
    doc = reference_cnn_doc()
    validator.validate(doc)
    validator.validate(Spec.from_dict(doc).to_dict())
    bad = copy.deepcopy(doc)
    bad["nodes"][0]["params"]["filters"] = 0
    assert not validator.is_valid(bad)
    bad["nodes"][0]["params"] = {"filters": 8, "kernel": 3}
    assert not validator.is_valid(bad)
    bad = copy.deepcopy(doc)
    bad["nodes"][0]["op"] = "conv3d"
    assert not validator.is_valid(bad)
