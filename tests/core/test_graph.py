"""Graph validation: every documented error names the node at fault; shapes are inferred."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core.errors import (
    CycleError,
    DanglingInputError,
    HyperParameterError,
    SchemaError,
    ShapeError,
    SpecError,
    UnknownOpError,
)
from core.graph import load, validate
from core.spec import Spec
from tests.core.specs import reference_cnn_doc


def _nodes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in doc["nodes"]}


def test_shape_inference_through_the_reference_cnn() -> None:
    graph = load(reference_cnn_doc())
    assert graph.types["conv1"].shape == (26, 26, 32)
    assert graph.types["pool1"].shape == (13, 13, 32)
    assert graph.types["conv2"].shape == (11, 11, 64)
    assert graph.types["pool2"].shape == (5, 5, 64)
    assert graph.types["flat"].shape == (1600,)
    assert graph.output_type.shape == (10,)
    assert graph.order[0].id == "conv1"


def test_defaults_are_filled_in() -> None:
    graph = load(reference_cnn_doc())
    conv = graph.spec.node("conv1")
    assert conv.params["kernel_size"] == [3, 3] and conv.params["strides"] == [1, 1]
    assert conv.params["use_bias"] is True


def test_same_padding_with_stride_rounds_up() -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["conv1"]["params"] = {"filters": 8, "strides": 2, "padding": "same"}
    assert load(doc).types["conv1"].shape == (14, 14, 8)


def test_topological_order_ignores_document_order() -> None:
    doc = reference_cnn_doc()
    doc["nodes"].reverse()
    order = [n.id for n in load(doc).order]
    assert order.index("conv1") < order.index("pool1") < order.index("logits")


def _expect(doc: dict[str, Any], error: type[SpecError], node: str | None, message: str) -> None:
    with pytest.raises(error, match=message) as info:
        validate(Spec.from_dict(doc))
    assert info.value.node == node
    if node is not None:
        assert f"node '{node}'" in str(info.value)


def test_unknown_op_names_the_node() -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["relu2"]["op"] = "relu"
    _expect(doc, UnknownOpError, "relu2", "unknown op 'relu'")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"filters": 0}, "'filters' must be >= 1"),
        ({"filters": 2.5}, "'filters' must be an int"),
        ({"filters": True}, "'filters' must be an int"),
        ({}, "missing required hyper-parameter 'filters'"),
        ({"filters": 4, "padding": "full"}, "'padding' must be one of"),
        ({"filters": 4, "kernel_size": [3, 3, 3]}, "'kernel_size' must be an int or a list of two"),
        ({"filters": 4, "dilation": 2}, "unknown hyper-parameter"),
    ],
)
def test_bad_hyper_parameter_names_the_node(params: dict[str, Any], message: str) -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["conv2"]["params"] = params
    _expect(doc, HyperParameterError, "conv2", message)


def test_dropout_rate_one_is_rejected() -> None:
    doc = reference_cnn_doc()
    doc["nodes"].append({"id": "drop", "op": "dropout", "inputs": ["relu3"], "params": {"rate": 1.0}})
    _nodes(doc)["logits"]["inputs"] = ["drop"]
    _expect(doc, HyperParameterError, "drop", "'rate' must be < 1.0")


def test_shape_mismatch_names_the_node() -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["fc1"]["inputs"] = ["pool2"]  # dense on [5, 5, 64] is rank 3
    _nodes(doc)["flat"]["inputs"] = ["pool2"]
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] != "flat"]
    _expect(doc, ShapeError, "fc1", "rank 1 or 2")


def test_add_of_different_shapes_is_a_shape_error() -> None:
    doc = reference_cnn_doc()
    doc["nodes"].append({"id": "sum", "op": "add", "inputs": ["pool1", "pool2"]})
    _nodes(doc)["flat"]["inputs"] = ["sum"]
    _expect(doc, ShapeError, "sum", "add needs inputs of one shape")


def test_window_larger_than_input_is_a_shape_error() -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["conv2"]["params"] = {"filters": 8, "kernel_size": 20, "padding": "valid"}
    _expect(doc, ShapeError, "conv2", "does not fit")


def test_embedding_needs_integer_input() -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["conv1"].update(op="embedding", params={"vocab_size": 10, "dim": 4})
    _expect(doc, ShapeError, "conv1", "int32")


def test_wrong_output_width_is_a_shape_error() -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["logits"]["params"]["units"] = 7
    _expect(doc, ShapeError, "logits", r"must yield \[10\] logits")


def test_cycle_names_a_node_on_it() -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["conv2"]["inputs"] = ["relu2"]  # conv2 -> relu2 -> conv2
    with pytest.raises(CycleError, match="cycle") as info:
        validate(Spec.from_dict(doc))
    assert info.value.node in {"conv2", "relu2"}
    assert "conv2" in str(info.value) and "relu2" in str(info.value)


def test_dangling_input_names_the_reader() -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["pool2"]["inputs"] = ["relu_2"]
    _expect(doc, DanglingInputError, "pool2", "reads 'relu_2'")


def test_unused_node_is_reported() -> None:
    doc = reference_cnn_doc()
    doc["nodes"].append({"id": "spare", "op": "activation", "inputs": ["conv1"]})
    _expect(doc, DanglingInputError, "spare", "never used")


def test_wrong_arity_is_reported() -> None:
    doc = reference_cnn_doc()
    _nodes(doc)["relu1"]["inputs"] = ["conv1", "conv1"]
    _expect(doc, DanglingInputError, "relu1", "takes 1 input")
    doc = reference_cnn_doc()
    doc["nodes"].append({"id": "sum", "op": "add", "inputs": ["pool2"]})
    _nodes(doc)["flat"]["inputs"] = ["sum"]
    _expect(doc, DanglingInputError, "sum", "at least 2")


def test_duplicate_ids_and_missing_output() -> None:
    doc = reference_cnn_doc()
    doc["nodes"].append(copy.deepcopy(_nodes(doc)["relu3"]))
    _expect(doc, SchemaError, "relu3", "duplicate")
    doc = reference_cnn_doc()
    doc["output"]["node"] = "head"
    _expect(doc, SchemaError, None, "output node 'head'")
