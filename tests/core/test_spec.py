"""The spec document: JSON round trip, structural errors, published JSON Schema."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from core.errors import SchemaError
from core.schema import json_schema, published_schema
from core.spec import InputSpec, Spec
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
        (lambda d: d["input"].update(scale=[1.0, 2.0]), "2 values; the input has 1 channels"),
        (lambda d: d["input"].update(scale=[]), "input.scale"),
        (lambda d: d["input"].update(scale=[0.0]), "must not be 0"),
        (lambda d: d["input"].update(offset=[float("nan")]), "input.offset"),
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


def test_per_channel_scale_and_offset_round_trip_and_validate() -> None:
    doc = copy.deepcopy(reference_cnn_doc())
    doc["input"].update(shape=[28, 28, 3], scale=[0.5, 0.25, 2], offset=[-1, 0.0, 1.5])
    spec = Spec.from_dict(doc)
    assert (spec.input.scale, spec.input.offset) == ((0.5, 0.25, 2.0), (-1.0, 0.0, 1.5))
    assert Spec.from_json(spec.to_json()) == spec
    assert spec.to_dict()["input"]["scale"] == [0.5, 0.25, 2.0]
    jsonschema.Draft202012Validator(json_schema()).validate(spec.to_dict())


def test_scalar_scale_and_offset_still_load() -> None:
    doc = copy.deepcopy(reference_cnn_doc())
    doc["input"].update(scale=1 / 255, offset=-0.5)
    spec = Spec.from_dict(doc)
    assert (spec.input.scale, spec.input.offset) == (1 / 255, -0.5)
    assert spec.to_dict()["input"]["offset"] == -0.5


def test_a_per_channel_tuple_must_match_the_channels() -> None:
    with pytest.raises(SchemaError, match="3 channels"):
        InputSpec((4, 4, 3), scale=(1.0, 2.0))


def test_schema_refuses_a_zero_in_a_per_channel_scale() -> None:
    doc = copy.deepcopy(reference_cnn_doc())
    doc["input"].update(shape=[28, 28, 2], scale=[1.0, 0])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(json_schema()).validate(doc)
