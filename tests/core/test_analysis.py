"""Static analysis: parameter count, multiply-adds, activation memory and bytes on disk."""

from __future__ import annotations

import json

import jax
import numpy as np

from core.analysis import analyse, architecture
from core.graph import Graph, load
from core.model import build
from core.tree import flatten
from tests.core.specs import reference_cnn, reference_cnn_doc

# Counted by hand for the reference CNN (valid padding): conv 3x3x1x32, conv 3x3x32x64,
# dense 1600x128, dense 128x10, each with a bias.
REF_PARAMS = (9 * 32 + 32) + (9 * 32 * 64 + 64) + (1600 * 128 + 128) + (128 * 10 + 10)
REF_MACS = 26 * 26 * 9 * 32 + 11 * 11 * 9 * 32 * 64 + 1600 * 128 + 128 * 10


def test_reference_cnn_counts_match_hand_count() -> None:
    a = analyse(reference_cnn())
    assert a.params == REF_PARAMS == 225_034
    assert a.macs == REF_MACS
    assert a.flops(batch_size=128) == 2 * REF_MACS * 128
    assert a.state == 0


def test_param_count_matches_the_built_model() -> None:
    spec = reference_cnn()
    variables = build(spec).init(jax.random.key(0))
    counted = sum(int(np.size(v)) for v in flatten(variables["params"]).values())
    assert analyse(spec).params == counted


def _with_batch_norm() -> Graph:
    """The reference CNN with a batch norm `bn` after its first convolution (32 channels)."""
    doc = reference_cnn_doc()
    doc["nodes"].insert(1, {"id": "bn", "op": "batch_norm", "inputs": ["conv1"]})
    doc["nodes"][2]["inputs"] = ["bn"]
    return load(doc)


def test_batch_norm_state_and_activation_memory() -> None:
    graph = _with_batch_norm()
    a = analyse(graph)
    assert a.state == 2 * 32
    assert a.params == REF_PARAMS + 2 * 32
    per_example = 28 * 28 * 1 + sum(int(np.prod(t.shape)) for k, t in graph.types.items() if k != "input")
    assert a.activation_elements == per_example
    assert a.activation_bytes(batch_size=64) == per_example * 64 * 4


def test_bytes_on_disk_tracks_the_checkpoint_size() -> None:
    from core.checkpoint import to_bytes

    spec = reference_cnn()
    variables = build(spec).init(jax.random.key(0))
    actual = len(to_bytes(spec, variables))
    estimate = analyse(spec).bytes_on_disk
    assert abs(estimate - actual) / actual < 0.05


def test_per_node_costs_sum_to_totals() -> None:
    a = analyse(reference_cnn())
    assert sum(n.params for n in a.nodes) == a.params
    assert sum(n.macs for n in a.nodes) == a.macs
    assert {n.node: n.macs for n in a.nodes}["conv2"] == 11 * 11 * 9 * 32 * 64


def test_architecture_lists_each_layer_with_its_output_shape_and_params() -> None:
    graph = _with_batch_norm()
    arch = architecture(graph)
    assert arch["input_shape"] == [28, 28, 1]
    assert [layer["name"] for layer in arch["layers"]] == [node.id for node in graph.order]
    assert {layer["name"]: layer["output_shape"] for layer in arch["layers"]} == {
        node: list(t.shape) for node, t in graph.types.items() if node != "input"}
    assert arch["layers"][-1]["output_shape"] == [10]
    bn = next(layer for layer in arch["layers"] if layer["name"] == "bn")
    assert (bn["op"], bn["params"], bn["inputs"]) == ("batch_norm", 2 * 32, ["conv1"])  # running stats are no params
    assert sum(layer["params"] for layer in arch["layers"]) == analyse(graph).params
    assert json.loads(json.dumps(arch)) == arch  # stored as it is
