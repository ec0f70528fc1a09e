"""Temperature scaling folded into the weights: the logits layers scaled, the logits divided, ONNX agreeing."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from core import Spec, SpecError, build, logit_layers, predict_proba, scale_logits, to_onnx_bytes
from domain.onnx_run import OnnxClassifier
from tests.core.specs import tiny_spec


def _summed() -> Spec:
    """Two dense heads on one feature vector, summed, then dropout: an ensemble's output."""
    return Spec.from_dict({
        "input": {"shape": [5]},
        "nodes": [{"id": "h", "op": "dense", "inputs": ["input"], "params": {"units": 8}},
                  {"id": "r", "op": "activation", "inputs": ["h"]},
                  {"id": "a", "op": "dense", "inputs": ["r"], "params": {"units": 3}},
                  {"id": "b", "op": "dense", "inputs": ["r"], "params": {"units": 3}},
                  {"id": "sum", "op": "add", "inputs": ["a", "b"]},
                  {"id": "drop", "op": "dropout", "inputs": ["sum"], "params": {"rate": 0.2}}],
        "output": {"node": "drop", "num_classes": 3}})


@pytest.mark.parametrize("factor", [0.25, 2.0])
def test_scaling_the_logits_layers_divides_the_logits_in_jax_and_onnx(factor: float) -> None:
    spec = _summed()
    variables = build(spec).init(jax.random.key(0))
    x = np.random.default_rng(0).normal(size=(16, 5)).astype(np.float32)
    logits, _ = build(spec).apply(variables, x, train=False)
    scaled = scale_logits(spec, variables, factor)
    expected = np.asarray(jax.nn.softmax(np.asarray(logits) * factor, axis=-1))
    np.testing.assert_allclose(predict_proba(build(spec), scaled, x), expected, atol=1e-5)
    np.testing.assert_allclose(OnnxClassifier(to_onnx_bytes(spec, scaled)).predict_proba(x), expected, atol=1e-5)
    np.testing.assert_array_equal(variables["params"]["h"]["kernel"], scaled["params"]["h"]["kernel"])
    assert logit_layers(spec) == ["b", "a"] or logit_layers(spec) == ["a", "b"]


def test_the_weights_given_are_left_as_they_were() -> None:
    spec = tiny_spec(batch_norm=False)
    variables = build(spec).init(jax.random.key(1))
    before = np.array(variables["params"]["out"]["kernel"])
    scale_logits(spec, variables, 3.0)
    np.testing.assert_array_equal(variables["params"]["out"]["kernel"], before)


def test_an_output_not_made_by_dense_layers_is_refused() -> None:
    doc = _summed().to_dict()
    doc["nodes"].append({"id": "act", "op": "activation", "inputs": ["drop"], "params": {"fn": "tanh"}})
    doc["output"]["node"] = "act"
    with pytest.raises(SpecError, match="activation"):
        logit_layers(Spec.from_dict(doc))
