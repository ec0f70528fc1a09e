"""Tests of core.model: what each op computes, value by value."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.errors import SpecError
from core.graph import validate
from core.spec import INPUT, InputSpec
from tests.core.model_specs import SEQ, TEXT, VEC
from tests.core.model_specs import node as _n
from tests.core.model_specs import probe as _probe
from tests.core.model_specs import spec as _spec


def _gelu(x: np.ndarray) -> np.ndarray:
    return np.asarray([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.ravel()]).reshape(
        x.shape)


ACTIVATIONS: dict[str, Any] = {
    "relu": lambda x: np.maximum(x, 0),
    "relu6": lambda x: np.clip(x, 0, 6),
    "gelu": _gelu,
    "swish": lambda x: x / (1 + np.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.01 * x),
    "identity": lambda x: x,
}


@pytest.mark.parametrize("fn", sorted(ACTIVATIONS))
def test_activation_values(fn: str) -> None:
    model, variables = _probe(VEC, [_n("op", "activation", fn=fn)], "op")
    x = np.linspace(-8, 8, 20, dtype=np.float32).reshape(4, 5)
    out, _ = model.apply(variables, x)
    np.testing.assert_allclose(out, ACTIVATIONS[fn](x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_input_scale_and_offset_apply_first() -> None:
    inp = InputSpec((3,), modality="tabular", scale=0.5, offset=-1.0)
    model, variables = _probe(inp, [_n("op", "activation", fn="identity")], "op")
    x = np.asarray([[0.0, 2.0, 10.0]], np.float32)
    out, _ = model.apply(variables, x)
    np.testing.assert_allclose(out, x * 0.5 - 1.0)


def test_per_channel_scale_and_offset_apply_on_the_last_axis() -> None:
    inp = InputSpec((2, 3), modality="tabular", scale=(0.5, 2.0, -1.0), offset=(1.0, 0.0, -3.0))
    model, variables = _probe(inp, [_n("op", "activation", fn="identity")], "op")
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    out, _ = model.apply(variables, x)
    want = x * np.asarray([0.5, 2.0, -1.0], np.float32) + np.asarray([1.0, 0.0, -3.0], np.float32)
    np.testing.assert_allclose(out, want.reshape(2, -1))


def test_pooling_values() -> None:
    img = InputSpec((4, 5, 2))
    x = np.random.default_rng(0).normal(size=(2, 4, 5, 2)).astype(np.float32)
    windows = x[:, :4, :4].reshape(2, 2, 2, 2, 2, 2)  # 2x2 tiles, ragged column dropped
    for op, ref in (("max_pool2d", windows.max(axis=(2, 4))), ("avg_pool2d", windows.mean(axis=(2, 4))),
                    ("global_avg_pool", x.mean(axis=(1, 2))), ("global_max_pool", x.max(axis=(1, 2)))):
        model, variables = _probe(img, [_n("op", op)], "op")
        out, _ = model.apply(variables, x)
        np.testing.assert_allclose(out, ref.reshape(2, -1), rtol=1e-6, err_msg=op)


def test_add_and_concat_values() -> None:
    x = np.random.default_rng(0).normal(size=(2, 6, 4)).astype(np.float32)
    model, variables = _probe(SEQ, [_n("a", "activation", fn="tanh"),
                                    _n("op", "add", ("a", INPUT, INPUT))], "op")
    np.testing.assert_allclose(model.apply(variables, x)[0], (np.tanh(x) + 2 * x).reshape(2, -1),
                               rtol=1e-5)
    model, variables = _probe(SEQ, [_n("a", "activation", fn="relu"),
                                    _n("op", "concat", (INPUT, "a"))], "op")
    ref = np.concatenate([x, np.maximum(x, 0)], axis=-1)
    np.testing.assert_allclose(model.apply(variables, x)[0], ref.reshape(2, -1))


def test_embedding_values_and_out_of_range_ids_give_zero_vectors() -> None:
    model, variables = _probe(TEXT, [_n("op", "embedding", vocab_size=5, dim=3)], "op")
    table = np.asarray(variables["params"]["op"]["embedding"])
    ids = np.asarray([[0, 4, -1, 5, 1000, 2]], np.int32)
    out = np.asarray(model.apply(variables, ids)[0]).reshape(6, 3)
    np.testing.assert_allclose(out[[0, 1, 5]], table[[0, 4, 2]])
    assert np.all(out[[2, 3, 4]] == 0)

    def loss(params: Any) -> jax.Array:
        return jnp.sum(model.apply({"params": params}, ids)[0] ** 2)

    grads = jax.grad(loss)(variables["params"])["op"]["embedding"]
    assert bool(jnp.all(jnp.isfinite(grads)))
    assert bool(jnp.all(grads[jnp.asarray([1, 3])] == 0)) and bool(jnp.any(grads[0] != 0))


def test_embedding_length_reads_only_the_first_ids() -> None:
    model, variables = _probe(TEXT, [_n("op", "embedding", vocab_size=5, dim=3, length=2)], "op")
    table = np.asarray(variables["params"]["op"]["embedding"])
    out = np.asarray(model.apply(variables, np.asarray([[3, 4, 1, 1, 2, 2]], np.int32))[0])
    np.testing.assert_allclose(out.reshape(2, 3), table[[3, 4]])


@pytest.mark.parametrize(("norm", "divisor"), [("mean", 3.0), ("sqrt", np.sqrt(3.0)), ("sum", 1.0)])
def test_embedding_bag_sums_the_kept_ids_over_their_norm(norm: str, divisor: float) -> None:
    """Ids before `start`, padding (0) and ids outside the vocabulary are left out; an empty bag is zero."""
    ids = np.asarray([[4, 2, 0, 3, 7, 3, -1], [4, 0, 0, 9, -2, 0, 0]], np.int32)
    model, variables = _probe(InputSpec((7,), dtype="int32", modality="text"),
                              [_n("op", "embedding_bag", vocab_size=5, dim=3, start=1, norm=norm)], "op")
    table = np.asarray(variables["params"]["op"]["embedding"])
    out = np.asarray(model.apply(variables, ids)[0])
    np.testing.assert_allclose(out[0], (table[2] + 2 * table[3]) / divisor, rtol=1e-6)
    assert np.all(out[1] == 0)


def test_embedding_bag_rejects_a_start_past_the_input() -> None:
    with pytest.raises(SpecError, match="start 6"):
        validate(_spec(TEXT, [_n("op", "embedding_bag", vocab_size=5, dim=3, start=6)], "op"))


def test_position_embedding_adds_the_table() -> None:
    model, variables = _probe(SEQ, [_n("op", "position_embedding")], "op")
    table = np.asarray(variables["params"]["op"]["embedding"])
    assert np.any(table != 0)
    x = np.random.default_rng(0).normal(size=(3, 6, 4)).astype(np.float32)
    np.testing.assert_allclose(model.apply(variables, x)[0], (x + table).reshape(3, -1), rtol=1e-6)
