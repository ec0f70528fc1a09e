"""ONNX export parity: every op, exported alone, matches Model.apply in onnxruntime to 1e-4."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from core import tree
from core.checkpoint import from_bytes, to_bytes
from core.errors import CheckpointError
from core.model import Model, build
from core.onnx_export import MAX_OPSET, export_onnx, to_onnx_bytes
from core.ops import ACTIVATIONS, OPS
from core.reparam import Reparam, materialise, trainable
from core.spec import Spec
from domain.onnx_run import OnnxClassifier
from tests.core.conftest import random_variables

TOL = 1e-4
CLASSES = 3


def node(nid: str, op: str, inputs: list[str], **params: Any) -> dict[str, Any]:
    return {"id": nid, "op": op, "inputs": inputs, "params": params}


def head(last: str, rank: int) -> list[dict[str, Any]]:
    """Nodes that turn ``last`` (of ``rank`` without batch) into the logits."""
    if rank == 1:
        return [node("logits", "dense", [last], units=CLASSES)]
    return [node("flat", "flatten", [last]), node("logits", "dense", ["flat"], units=CLASSES)]


def make_spec(shape: list[int], body: list[dict[str, Any]], out_rank: int, dtype: str = "float32",
              **inp: Any) -> Spec:
    modality = "text" if dtype == "int32" else "image"
    return Spec.from_dict({
        "input": {"shape": shape, "dtype": dtype, "modality": modality, **inp},
        "nodes": body + head(body[-1]["id"], out_rank),
        "output": {"node": "logits", "num_classes": CLASSES}})


def perturbed(variables: dict[str, Any], seed: int = 1) -> dict[str, Any]:
    """Randomise every variable so that biases, norms and batch statistics all matter."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for kind, leaves in variables.items():
        flat = {}
        for path, a in tree.flatten(leaves).items():
            a = np.asarray(a)
            if path.endswith("var"):
                flat[path] = rng.uniform(0.5, 2.0, a.shape).astype(a.dtype)
            else:
                flat[path] = (a + rng.normal(0, 0.3, a.shape)).astype(a.dtype)
        out[kind] = tree.unflatten(flat)
    return out


def logits_of(model: Model, variables: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return np.asarray(jax.jit(lambda v, x: model.apply(v, x)[0])(variables, x))


def random_input(spec: Spec, batch: int, seed: int = 2, vocab: int = 10) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (batch, *spec.input.shape)
    if spec.input.dtype == "int32":
        return rng.integers(-3, vocab + 3, shape).astype(np.int32)  # includes out-of-vocabulary ids
    return rng.normal(0, 1, shape).astype(np.float32)


def session(model: onnx.ModelProto | bytes) -> ort.InferenceSession:
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def parity(spec: Spec, batch: int = 4, seed: int = 0, opset: int = 17) -> float:
    """Export a model with random variables and return max |logits_onnx - logits_jax|."""
    variables = random_variables(spec, seed)
    sess = session(export_onnx(spec, variables, opset=opset))
    x = random_input(spec, batch)
    logits, proba = sess.run(["logits", "probabilities"], {"input": x})
    expected = logits_of(build(spec), variables, x)
    assert logits.shape == expected.shape == (batch, CLASSES)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    return float(np.max(np.abs(logits - expected)))


IMG, SEQ, VEC = [6, 7, 3], [9, 4], [5]
CASES: dict[str, tuple[list[int], list[dict[str, Any]], int]] = {
    "conv2d-same": (IMG, [node("x", "conv2d", ["input"], filters=4)], 3),
    "conv2d-valid-stride2-nobias": (IMG, [node("x", "conv2d", ["input"], filters=4, strides=2,
                                               padding="valid", use_bias=False)], 3),
    "conv2d-same-even-kernel-strides": (IMG, [node("x", "conv2d", ["input"], filters=2,
                                                   kernel_size=[2, 4], strides=[2, 3])], 3),
    "depthwise_conv2d-same-stride2-mult2": (IMG, [node("x", "depthwise_conv2d", ["input"],
                                                       depth_multiplier=2, strides=2)], 3),
    "depthwise_conv2d-valid": (IMG, [node("x", "depthwise_conv2d", ["input"], padding="valid",
                                          kernel_size=[2, 3])], 3),
    "separable_conv2d-same-stride2": (IMG, [node("x", "separable_conv2d", ["input"], filters=5,
                                                 depth_multiplier=2, strides=2)], 3),
    "separable_conv2d-valid-nobias": (IMG, [node("x", "separable_conv2d", ["input"], filters=2,
                                                 padding="valid", use_bias=False)], 3),
    "conv1d-same": (SEQ, [node("x", "conv1d", ["input"], filters=3)], 2),
    "conv1d-same-stride2-k4": (SEQ, [node("x", "conv1d", ["input"], filters=3, kernel_size=4,
                                          strides=2)], 2),
    "conv1d-valid-stride3": (SEQ, [node("x", "conv1d", ["input"], filters=2, strides=3,
                                        padding="valid")], 2),
    "dense-vector": (VEC, [node("x", "dense", ["input"], units=6)], 1),
    "dense-sequence-nobias": (SEQ, [node("x", "dense", ["input"], units=6, use_bias=False)], 2),
    "max_pool2d": (IMG, [node("x", "max_pool2d", ["input"])], 3),
    "max_pool2d-overlapping": (IMG, [node("x", "max_pool2d", ["input"], pool_size=3,
                                          strides=[2, 1])], 3),
    "avg_pool2d": (IMG, [node("x", "avg_pool2d", ["input"], pool_size=[2, 3])], 3),
    "avg_pool2d-overlapping": (IMG, [node("x", "avg_pool2d", ["input"], pool_size=3,
                                          strides=2)], 3),
    "max_pool1d": (SEQ, [node("x", "max_pool1d", ["input"], pool_size=3, strides=2)], 2),
    "avg_pool1d": (SEQ, [node("x", "avg_pool1d", ["input"])], 2),
    "global_avg_pool-image": (IMG, [node("x", "global_avg_pool", ["input"])], 1),
    "global_max_pool-image": (IMG, [node("x", "global_max_pool", ["input"])], 1),
    "global_avg_pool-sequence": (SEQ, [node("x", "global_avg_pool", ["input"])], 1),
    "global_max_pool-sequence": (SEQ, [node("x", "global_max_pool", ["input"])], 1),
    "batch_norm-image": (IMG, [node("x", "batch_norm", ["input"], epsilon=1e-3)], 3),
    "batch_norm-vector": (VEC, [node("x", "batch_norm", ["input"])], 1),
    "layer_norm-sequence": (SEQ, [node("x", "layer_norm", ["input"])], 2),
    "layer_norm-vector": (VEC, [node("x", "layer_norm", ["input"], epsilon=1e-3)], 1),
    "dropout": (VEC, [node("x", "dropout", ["input"], rate=0.5)], 1),
    "flatten": ([3, 5, 2], [node("x", "flatten", ["input"])], 1),
    "add": (IMG, [node("a", "conv2d", ["input"], filters=3), node("b", "activation", ["input"]),
                  node("x", "add", ["a", "b", "input"])], 3),
    "concat": (SEQ, [node("a", "dense", ["input"], units=2),
                     node("x", "concat", ["input", "a", "input"])], 2),
    "self_attention": ([5, 8], [node("x", "self_attention", ["input"], num_heads=2)], 2),
    "self_attention-one-head": ([4, 6], [node("x", "self_attention", ["input"], num_heads=1)], 2),
    "position_embedding": (SEQ, [node("x", "position_embedding", ["input"])], 2),
    **{f"activation-{fn}": (VEC, [node("x", "activation", ["input"], fn=fn)], 1)
       for fn in ACTIVATIONS},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_parity(case):
    shape, body, rank = CASES[case]
    spec = make_spec(shape, body, rank, scale=0.5, offset=0.25)
    assert parity(spec) <= TOL


@pytest.mark.parametrize("case", ["conv2d-same", "batch_norm-image", "global_max_pool-image"])
def test_per_channel_scale_and_offset_parity(case):
    shape, body, rank = CASES[case]
    spec = make_spec(shape, body, rank, scale=[1 / 255, 0.5, 4.0], offset=[-0.5, 0.0, 3.0])
    assert spec.input.scale == (1 / 255, 0.5, 4.0)
    assert parity(spec) <= TOL


def test_per_channel_input_is_normalised_per_channel():
    spec = make_spec([2, 2, 2], [node("x", "flatten", ["input"])], 1, scale=[2.0, 0.5], offset=[1.0, -1.0])
    pick = {"params": {"logits": {"kernel": np.eye(8, CLASSES, dtype=np.float32),  # the first 3 flat values
                                  "bias": np.zeros(CLASSES, np.float32)}}}
    x = np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2)
    want = (x * np.array([2.0, 0.5], np.float32) + np.array([1.0, -1.0], np.float32)).reshape(2, 8)[:, :CLASSES]
    got = session(export_onnx(spec, pick)).run(["logits"], {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(logits_of(build(spec), pick, x), want, rtol=1e-6)


def test_embedding_parity_with_out_of_vocabulary_ids():
    body = [node("x", "embedding", ["input"], vocab_size=10, dim=4)]
    spec = make_spec([7], body, 2, dtype="int32")
    assert parity(spec, batch=6) <= TOL


@pytest.mark.parametrize("norm", ["mean", "sqrt", "sum"])
def test_embedding_bag_parity(norm):
    """Ids after `start` bagged; 0 (padding), negative and out-of-vocabulary ids left out, rows of all padding
    included (random_input draws ids in [-3, 13), some rows get none kept after start)."""
    spec = make_spec([9], [node("x", "embedding_bag", ["input"], vocab_size=10, dim=4, start=3, norm=norm)], 1,
                     dtype="int32")
    assert parity(spec, batch=8) <= TOL


def test_embedding_of_the_first_positions_parity():
    body = [node("x", "embedding", ["input"], vocab_size=10, dim=4, length=5), node("p", "global_avg_pool", ["x"])]
    spec = make_spec([9], body, 1, dtype="int32")
    assert parity(spec, batch=6) <= TOL


def test_every_op_has_a_parity_case():
    covered = {n["op"] for _, body, _ in CASES.values() for n in body} | {"embedding", "embedding_bag"}
    assert covered == set(OPS)


def test_tolerance_detects_a_real_mismatch():
    spec = make_spec(IMG, [node("x", "conv2d", ["input"], filters=4)], 3)
    model = build(spec)
    variables = random_variables(spec)
    kernel = np.array(variables["params"]["x"]["kernel"])
    kernel[0, 0, 0, 0] += 0.01
    wrong = {**variables, "params": {**variables["params"],
                                     "x": {**variables["params"]["x"], "kernel": kernel}}}
    x = random_input(spec, 4)
    logits = session(export_onnx(spec, wrong)).run(["logits"], {"input": x})[0]
    assert np.max(np.abs(logits - logits_of(model, variables, x))) > TOL


def cnn_spec() -> Spec:
    body = [
        node("c1", "conv2d", ["input"], filters=6, strides=2),
        node("bn1", "batch_norm", ["c1"]),
        node("r1", "activation", ["bn1"], fn="relu6"),
        node("sep", "separable_conv2d", ["r1"], filters=6),
        node("dw", "depthwise_conv2d", ["sep"]),
        node("res", "add", ["dw", "r1"]),
        node("pool", "max_pool2d", ["res"]),
        node("c2", "conv2d", ["pool"], filters=4, kernel_size=1),
        node("cat", "concat", ["pool", "c2"]),
        node("gap", "global_avg_pool", ["cat"]),
        node("drop", "dropout", ["gap"], rate=0.3),
        node("fc", "dense", ["drop"], units=8),
        node("act", "activation", ["fc"], fn="swish"),
    ]
    return make_spec([12, 12, 3], body, 1, scale=1 / 255, offset=-0.5)


def text_spec() -> Spec:
    body = [
        node("emb", "embedding", ["input"], vocab_size=20, dim=8),
        node("pos", "position_embedding", ["emb"]),
        node("att", "self_attention", ["pos"], num_heads=2),
        node("res1", "add", ["pos", "att"]),
        node("ln1", "layer_norm", ["res1"]),
        node("ff1", "dense", ["ln1"], units=16),
        node("gelu", "activation", ["ff1"], fn="gelu"),
        node("ff2", "dense", ["gelu"], units=8),
        node("res2", "add", ["ln1", "ff2"]),
        node("ln2", "layer_norm", ["res2"]),
        node("gap", "global_avg_pool", ["ln2"]),
    ]
    return make_spec([10], body, 1, dtype="int32")


def test_whole_cnn_with_dynamic_batch():
    spec = cnn_spec()
    model = build(spec)
    variables = perturbed(model.init(jax.random.key(3)))
    sess = session(to_onnx_bytes(spec, variables))
    assert sess.get_inputs()[0].shape[0] == "batch"
    for batch in (1, 3, 8):
        x = np.random.default_rng(batch).integers(0, 256, (batch, 12, 12, 3)).astype(np.float32)
        logits = sess.run(["logits"], {"input": x})[0]
        assert np.max(np.abs(logits - logits_of(model, variables, x))) <= TOL


def test_text_transformer():
    spec = text_spec()
    model = build(spec)
    variables = perturbed(model.init(jax.random.key(4)))
    sess = session(export_onnx(spec, variables))
    for batch in (1, 5):
        x = np.random.default_rng(batch).integers(-2, 24, (batch, 10)).astype(np.int32)
        logits = sess.run(["logits"], {"input": x})[0]
        assert np.max(np.abs(logits - logits_of(model, variables, x))) <= TOL


@pytest.mark.parametrize("opset", [17, 18, MAX_OPSET])
def test_supported_opsets_run_in_onnxruntime(opset):
    spec = make_spec(IMG, [node("x", "global_max_pool", ["input"])], 1)
    assert parity(spec, opset=opset) <= TOL
    with pytest.raises(ValueError, match="opset"):
        export_onnx(spec, random_variables(spec), opset=MAX_OPSET + 1)


def test_export_rejects_variables_that_do_not_fit():
    spec = cnn_spec()
    variables = random_variables(spec)
    del variables["params"]["fc"]
    with pytest.raises(CheckpointError, match="fc"):
        export_onnx(spec, variables)


def compressed(spec: Spec, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any], Reparam]:
    """Return (dense variables, materialised variables, reparam) with a mask and a shared leaf."""
    rng = np.random.default_rng(seed)
    variables = random_variables(spec, seed)
    params = tree.flatten(variables["params"])
    conv, fc = np.asarray(params["c1/kernel"]), np.asarray(params["fc/kernel"])
    conv_mask = (rng.random(conv.shape) > 0.5).astype(np.float32)
    fc_mask = (rng.random(fc.shape) > 0.3).astype(np.float32)
    fc_idx = rng.integers(0, 4, fc.shape).astype(np.int32)
    codebook = rng.normal(0, 0.5, 4).astype(np.float32)
    reparam = Reparam(masks={"c1/kernel": jnp.asarray(conv_mask),
                             "fc/kernel": jnp.asarray(fc_mask)},
                      indices={"fc/kernel": jnp.asarray(fc_idx)}, sizes={"fc/kernel": 4})
    dense = {**params, "fc/kernel": codebook[fc_idx]}
    materialised = {**tree.flatten(materialise(trainable(dense, reparam), reparam))}
    return ({**variables, "params": tree.unflatten(dense)},
            {**variables, "params": tree.unflatten(materialised)}, reparam)


def test_masked_and_shared_parameters_export_dense():
    spec = cnn_spec()
    model = build(spec)
    dense, materialised, reparam = compressed(spec)
    x = np.random.default_rng(0).integers(0, 256, (4, 12, 12, 3)).astype(np.float32)
    expected = logits_of(model, materialised, x)
    for variables, rp in ((materialised, None), (dense, reparam)):
        logits = session(export_onnx(spec, variables, reparam=rp)).run(["logits"], {"input": x})[0]
        assert np.max(np.abs(logits - expected)) <= TOL
    loaded = from_bytes(to_bytes(spec, materialised, reparam))
    logits = session(export_onnx(loaded.spec, loaded.variables)).run(["logits"], {"input": x})[0]
    assert np.max(np.abs(logits - expected)) <= TOL
    unmasked = logits_of(model, dense, x)
    assert np.max(np.abs(unmasked - expected)) > TOL  # the masks do change the function


def test_classifier_from_raw_uint8_to_probabilities(tmp_path):
    spec = cnn_spec()
    model = build(spec)
    variables = random_variables(spec, 6)
    path = tmp_path / "model.onnx"
    path.write_bytes(to_onnx_bytes(spec, variables))
    clf = OnnxClassifier(path)
    assert (clf.input_shape, clf.num_classes) == ((12, 12, 3), CLASSES)
    assert clf.input_dtype == np.dtype(np.float32)
    images = np.random.default_rng(0).integers(0, 256, (5, 12, 12, 3)).astype(np.uint8)
    expected = np.asarray(jax.nn.softmax(logits_of(model, variables, images.astype(np.float32))))
    proba = clf.predict_proba(images)
    assert proba.shape == (5, CLASSES) and proba.dtype == np.float32
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(proba, expected, atol=1e-5)
    single = OnnxClassifier(path.read_bytes()).predict_proba(images[2])
    np.testing.assert_allclose(single, expected[2:3], atol=1e-5)
    np.testing.assert_array_equal(clf.predict(images), expected.argmax(axis=1))
    assert clf.predict_proba(images[:0]).shape == (0, CLASSES)
    for bad in (images[:, :6], images[..., 0], images[None]):
        with pytest.raises(ValueError, match="shape"):
            clf.predict_proba(bad)
    with pytest.raises(ValueError, match="ONNX"):
        OnnxClassifier(path.read_bytes()[:100])  # a truncated file


def test_classifier_casts_token_ids():
    spec = text_spec()
    model = build(spec)
    variables = random_variables(spec, 7)
    clf = OnnxClassifier(to_onnx_bytes(spec, variables))
    assert clf.input_dtype == np.int32
    ids = np.random.default_rng(1).integers(0, 20, (3, 10))
    ids[0, 0] = 2**40  # beyond int32: must stay out of the vocabulary, not wrap into it
    reference = ids.copy()
    reference[0, 0] = -1
    expected = np.asarray(jax.nn.softmax(logits_of(model, variables, reference.astype(np.int32))))
    np.testing.assert_allclose(clf.predict_proba(ids), expected, atol=1e-5)
    np.testing.assert_allclose(clf.predict_proba(ids[1].astype(np.float64)), expected[1:2],
                               atol=1e-5)
    with pytest.raises(ValueError, match="integers"):
        clf.predict_proba(ids + 0.5)


def test_runner_needs_no_jax():
    code = "import sys, domain.onnx_run; assert 'jax' not in sys.modules, 'jax imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
