"""Tests of core.model: every op compiles, matches the ops table, computes what it says, trains."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.errors import SpecError
from core.graph import validate
from core.model import build
from core.ops import OPS
from core.spec import INPUT, InputSpec, Node, Spec
from tests.core.model_specs import CLASSES, IMAGE, SEQ, TEXT, VEC
from tests.core.model_specs import node as _n
from tests.core.model_specs import probe as _probe
from tests.core.model_specs import spec as _spec

# One tiny network per op: the op under test is node "op".
CASES: dict[str, tuple[InputSpec, list[Node]]] = {
    "conv2d": (IMAGE, [_n("op", "conv2d", filters=3, strides=2)]),
    "conv2d_valid_nobias": (IMAGE, [_n("op", "conv2d", filters=3, kernel_size=[3, 2], strides=2,
                                       padding="valid", use_bias=False)]),
    "depthwise_conv2d": (IMAGE, [_n("op", "depthwise_conv2d", depth_multiplier=2, strides=2)]),
    "depthwise_conv2d_valid": (IMAGE, [_n("op", "depthwise_conv2d", padding="valid")]),
    "separable_conv2d": (IMAGE, [_n("op", "separable_conv2d", filters=3, depth_multiplier=2)]),
    "separable_conv2d_valid": (IMAGE, [_n("op", "separable_conv2d", filters=3, strides=2,
                                          padding="valid", use_bias=False)]),
    "conv1d": (SEQ, [_n("op", "conv1d", filters=3, strides=2)]),
    "conv1d_valid": (SEQ, [_n("op", "conv1d", filters=3, kernel_size=2, padding="valid")]),
    "dense": (VEC, [_n("op", "dense", units=4)]),
    "dense_seq": (SEQ, [_n("op", "dense", units=2, use_bias=False)]),
    "embedding": (TEXT, [_n("op", "embedding", vocab_size=5, dim=3)]),
    "embedding_bag": (TEXT, [_n("op", "embedding_bag", vocab_size=5, dim=3, start=2)]),
    "max_pool2d": (IMAGE, [_n("c", "conv2d", filters=2), _n("op", "max_pool2d", ("c",))]),
    "max_pool2d_overlap": (IMAGE, [_n("c", "conv2d", filters=2),
                                   _n("op", "max_pool2d", ("c",), pool_size=3, strides=[1, 2])]),
    "avg_pool2d": (IMAGE, [_n("c", "conv2d", filters=2), _n("op", "avg_pool2d", ("c",))]),
    "avg_pool2d_overlap": (IMAGE, [_n("c", "conv2d", filters=2),
                                   _n("op", "avg_pool2d", ("c",), pool_size=2, strides=1)]),
    "max_pool1d": (SEQ, [_n("c", "conv1d", filters=2), _n("op", "max_pool1d", ("c",))]),
    "avg_pool1d": (SEQ, [_n("c", "conv1d", filters=2),
                         _n("op", "avg_pool1d", ("c",), pool_size=3, strides=1)]),
    "global_avg_pool": (IMAGE, [_n("c", "conv2d", filters=2), _n("op", "global_avg_pool", ("c",))]),
    "global_max_pool": (SEQ, [_n("c", "conv1d", filters=2), _n("op", "global_max_pool", ("c",))]),
    "batch_norm": (IMAGE, [_n("op", "batch_norm", momentum=0.8)]),
    "layer_norm": (SEQ, [_n("op", "layer_norm")]),
    "activation": (VEC, [_n("d", "dense", units=4), _n("op", "activation", ("d",), fn="gelu")]),
    "dropout": (VEC, [_n("d", "dense", units=4), _n("op", "dropout", ("d",), rate=0.3)]),
    "flatten": (IMAGE, [_n("op", "flatten")]),
    "add": (VEC, [_n("a", "dense", units=4), _n("b", "dense", units=4),
                  _n("op", "add", ("a", "b"))]),
    "concat": (SEQ, [_n("a", "dense", units=2), _n("op", "concat", ("a", INPUT))]),
    "self_attention": (SEQ, [_n("op", "self_attention", num_heads=2)]),
    "position_embedding": (SEQ, [_n("op", "position_embedding")]),
}


def _inputs(inp: InputSpec, batch: int = 4, seed: int = 0) -> jax.Array:
    rng = np.random.default_rng(seed)
    if inp.dtype == "int32":
        return jnp.asarray(rng.integers(0, 5, (batch, *inp.shape)), jnp.int32)
    return jnp.asarray(rng.normal(size=(batch, *inp.shape)), jnp.float32)


def _shapes(tree: Any) -> Any:
    return jax.tree.map(lambda a: tuple(a.shape), tree)


def _expected_shapes(spec: Spec, which: str) -> dict[str, Any]:
    graph = validate(spec)
    out = {}
    for node in graph.order:
        table = getattr(OPS[node.op], which)(node.params, graph.input_types(node))
        if table:
            out[node.id] = table
    return out


def _as_tuples(tree: Any) -> Any:
    return {k: _as_tuples(v) for k, v in tree.items()} if isinstance(tree, dict) else tuple(tree)


def test_cases_cover_every_op() -> None:
    assert {nodes[-1].op for _, nodes in CASES.values()} == set(OPS)


@pytest.mark.parametrize("case", sorted(CASES))
def test_op(case: str) -> None:
    inp, nodes = CASES[case]
    spec = _spec(inp, nodes, "op")
    model = build(spec)
    variables = model.init(jax.random.key(0))
    # parameter and state shapes follow the ops table (also checks the op's output shape,
    # since the head's kernel is built from the actual flattened output)
    assert _shapes(variables["params"]) == _as_tuples(_expected_shapes(spec, "params"))
    expected_state = _expected_shapes(spec, "state")
    assert ("batch_stats" in variables) == bool(expected_state)
    if expected_state:
        assert _shapes(variables["batch_stats"]) == _as_tuples(expected_state)
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(variables))

    x = _inputs(inp)
    logits, stats = jax.jit(model.apply)(variables, x)
    assert logits.shape == (4, CLASSES) and logits.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(logits)))
    assert _shapes(stats) == _shapes(variables.get("batch_stats", {}))

    weights = jnp.asarray(np.random.default_rng(1).normal(size=(4, CLASSES)), jnp.float32)

    def loss(params: Any) -> jax.Array:
        out, _ = model.apply({**variables, "params": params}, x, train=True,
                             key=jax.random.key(2))
        return jnp.sum(out * weights)

    grads = jax.jit(jax.grad(loss))(variables["params"])
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        name = jax.tree_util.keystr(path)
        assert bool(jnp.all(jnp.isfinite(g))), name
        if "['key']['bias']" in name:  # softmax is invariant to a key bias: gradient is zero
            continue
        assert bool(jnp.any(g != 0)), name


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("op", ["conv2d", "depthwise_conv2d", "separable_conv2d"])
@pytest.mark.parametrize("size,kernel,stride", [(7, 3, 2), (8, 3, 2), (6, 2, 3), (5, 1, 1)])
def test_conv_output_shape_matches_inference(padding: str, op: str, size: int, kernel: int,
                                             stride: int) -> None:
    params: dict[str, Any] = {"kernel_size": kernel, "strides": stride, "padding": padding}
    if op != "depthwise_conv2d":
        params["filters"] = 2
    spec = _spec(InputSpec((size, size + 1, 1)), [Node("op", op, (INPUT,), params)], "op")
    model = build(spec)
    out_shape = validate(spec).types["op"].shape
    kernel_shape = jax.eval_shape(model.init, jax.random.key(0))["params"]["head"]["kernel"].shape
    assert kernel_shape == (math.prod(out_shape), CLASSES)


def test_init_is_deterministic_per_key() -> None:
    model = build(_spec(*CASES["separable_conv2d"], "op"))
    a, b = model.init(jax.random.key(0)), model.init(jax.random.key(0))
    c = model.init(jax.random.key(1))
    assert all(bool(jnp.array_equal(u, v)) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b),
                                                             strict=True))
    kernels = [k for k, v in zip(jax.tree.leaves(a), jax.tree.leaves(c), strict=True)
               if not bool(jnp.array_equal(k, v))]
    assert len(kernels) == 3  # every kernel differs; biases start at zero either way


def test_init_outside_and_inside_a_transformation_agree() -> None:
    """The init compiled without XLA's optimisations (it runs once) gives what traced code gives, to rounding."""
    model = build(_spec(*CASES["batch_norm"], "op"))
    key = jax.random.key(3)
    eager, traced = model.init(key), jax.jit(model.init)(key)
    assert str(jax.tree.structure(eager)) == str(jax.tree.structure(traced)) and "batch_stats" in eager
    for u, v in zip(jax.tree.leaves(eager), jax.tree.leaves(traced), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)
    assert jax.eval_shape(model.init, key) == jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), eager)


def test_batch_norm_train_updates_stats_and_eval_uses_them() -> None:
    model, variables = _probe(VEC, [_n("op", "batch_norm", momentum=0.75, epsilon=1e-3)], "op")
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(16, 5)).astype(np.float32)
    out, stats = model.apply(variables, x, train=True)
    # train: normalised with the batch's statistics; running stats move by (1 - momentum)
    ref = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(stats["op"]["mean"], 0.25 * x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats["op"]["var"], 0.75 + 0.25 * x.var(0), rtol=1e-5)
    # eval: uses the running statistics given, and returns them unchanged
    variables["params"]["op"] = {"scale": jnp.full(5, 2.0), "bias": jnp.full(5, 0.5)}
    out, same = model.apply({**variables, "batch_stats": stats}, x)
    mean, var = np.asarray(stats["op"]["mean"]), np.asarray(stats["op"]["var"])
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-3) * 2 + 0.5, rtol=1e-5,
                               atol=1e-5)
    assert same is stats or jax.tree.all(jax.tree.map(jnp.array_equal, same, stats))


def test_dropout_differs_between_keys_in_train_and_is_identity_in_eval() -> None:
    model, variables = _probe(InputSpec((64,), modality="tabular"),
                              [_n("op", "dropout", rate=0.5)], "op")
    x = np.ones((2, 64), np.float32)
    np.testing.assert_array_equal(model.apply(variables, x)[0], x)
    np.testing.assert_array_equal(model.apply(variables, x, key=jax.random.key(3))[0], x)
    a = np.asarray(model.apply(variables, x, train=True, key=jax.random.key(0))[0])
    b = np.asarray(model.apply(variables, x, train=True, key=jax.random.key(1))[0])
    assert set(np.unique(a)) <= {0.0, 2.0} and 0 < np.mean(a == 0) < 1  # inverted dropout
    assert not np.array_equal(a, b)
    with pytest.raises(ValueError, match="key"):
        model.apply(variables, x, train=True)


def _mixed_spec() -> Spec:
    """Conv, batch norm, residual add, dense concat and attention: the dtype-sensitive parts."""
    nodes = [
        _n("c1", "conv2d", filters=4), _n("bn", "batch_norm", ("c1",)),
        _n("r", "activation", ("bn",), fn="relu"), _n("c2", "conv2d", ("r",), filters=4),
        _n("res", "add", ("c1", "c2")), _n("cat", "concat", ("res", INPUT)),
        _n("mp", "max_pool2d", ("cat",)), _n("g", "global_avg_pool", ("mp",)),
        _n("d", "dense", ("g",), units=4), _n("dr", "dropout", ("d",), rate=0.1),
    ]
    return _spec(IMAGE, nodes, "dr")


def _text_spec() -> Spec:
    """Embedding, position embedding, layer norm, attention, conv1d and pooling on token ids."""
    nodes = [
        _n("e", "embedding", vocab_size=5, dim=4), _n("p", "position_embedding", ("e",)),
        _n("ln", "layer_norm", ("p",)), _n("at", "self_attention", ("ln",), num_heads=2),
        _n("c", "conv1d", ("at",), filters=4), _n("op", "avg_pool1d", ("c",)),
    ]
    return _spec(TEXT, nodes, "op")


@pytest.mark.parametrize("make", [_mixed_spec, _text_spec])
def test_bfloat16_compute_runs_and_stays_close_to_float32(make: Any) -> None:
    spec = make()
    f32, bf16 = build(spec, compute_dtype=jnp.float32), build(spec, compute_dtype=jnp.bfloat16)
    variables = f32.init(jax.random.key(0))
    assert jax.tree.all(jax.tree.map(lambda a: a.dtype == jnp.float32, bf16.init(jax.random.key(0))))
    x = _inputs(spec.input)
    ref, _ = jax.jit(f32.apply)(variables, x)
    out, stats = jax.jit(lambda v, x: bf16.apply(v, x, train=True, key=jax.random.key(0)))(
        variables, x)
    low, _ = jax.jit(bf16.apply)(variables, x)
    assert low.dtype == jnp.float32 and out.dtype == jnp.float32
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(stats))
    scale = float(jnp.max(jnp.abs(ref)))
    np.testing.assert_allclose(low, ref, atol=0.05 * scale + 1e-3)


def test_default_compute_dtype_is_float32_on_cpu() -> None:
    assert jax.default_backend() == "cpu"
    assert build(_mixed_spec()).compute_dtype == jnp.float32


def test_jit_apply_equals_apply() -> None:
    model = build(_mixed_spec())
    variables = model.init(jax.random.key(0))
    x, key = _inputs(IMAGE), jax.random.key(5)
    for train in (False, True):
        eager = model.apply(variables, x, train=train, key=key)
        jitted = jax.jit(lambda v, x, k, t=train: model.apply(v, x, train=t, key=k))(
            variables, x, key)
        for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_residual_and_dense_graphs_train() -> None:
    nodes = [
        _n("stem", "conv2d", filters=3),
        _n("b1", "conv2d", ("stem",), filters=3), _n("res", "add", ("stem", "b1")),
        _n("b2", "conv2d", ("res",), filters=2), _n("cat1", "concat", ("res", "b2")),
        _n("b3", "separable_conv2d", ("cat1",), filters=2), _n("cat2", "concat", ("cat1", "b3")),
        _n("gap", "global_avg_pool", ("cat2",)),
    ]
    spec = Spec(IMAGE, (*nodes, _n("head", "dense", ("gap",), units=CLASSES)), "head", CLASSES)
    model = build(spec)
    variables = model.init(jax.random.key(0))
    x, y = _inputs(IMAGE, batch=8), jnp.arange(8) % CLASSES

    @jax.jit
    def loss(params: Any) -> jax.Array:
        logits, _ = model.apply({"params": params}, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    step = jax.jit(lambda p: jax.tree.map(lambda a, g: a - 0.1 * g, p, jax.grad(loss)(p)))
    params = variables["params"]
    before = float(loss(params))
    for _ in range(5):
        params = step(params)
    assert float(loss(params)) < before


def test_build_accepts_a_graph_and_rejects_invalid_specs() -> None:
    spec = _spec(*CASES["dense"], "op")
    graph = validate(spec)
    assert build(graph).graph is graph
    assert build(spec).spec == graph.spec
    bad = _spec(VEC, [_n("op", "conv2d", filters=2)], "op")
    with pytest.raises(SpecError):
        build(bad)


def test_network_without_parameters_has_an_empty_params_dict() -> None:
    spec = Spec(InputSpec((2, 2, 3)), (_n("g", "global_avg_pool"),), "g", 3)
    model = build(spec)
    variables = model.init(jax.random.key(0))
    assert variables == {"params": {}}
    x = np.arange(24, dtype=np.float32).reshape(2, 2, 2, 3)
    np.testing.assert_allclose(model.apply(variables, x)[0], x.mean(axis=(1, 2)))
