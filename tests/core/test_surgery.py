"""Structural surgery: removing zeroed units leaves a smaller network that computes the same."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.errors import CheckpointError, SpecError
from core.graph import validate
from core.model import build
from core.spec import Spec
from core.surgery import filter_norms, removable_nodes, remove_units, remove_units_many, zero_units
from tests.core.conftest import random_variables


def make_spec(shape: list[int], nodes: list[dict[str, Any]], classes: int = 3) -> Spec:
    return Spec.from_dict({"input": {"shape": shape}, "nodes": nodes,
                           "output": {"node": nodes[-1]["id"], "num_classes": classes}})


def n(node_id: str, op: str, inputs: list[str], **params: Any) -> dict[str, Any]:
    return {"id": node_id, "op": op, "inputs": inputs, "params": params}


def apply(spec: Spec, variables: dict[str, Any], x: jax.Array, train: bool = False) -> Any:
    model = build(spec)
    return jax.jit(lambda v, x: model.apply(v, x, train=train))(variables, x)


def inputs(spec: Spec, batch: int = 5) -> jax.Array:
    return jnp.asarray(np.random.default_rng(42).normal(size=(batch, *spec.input.shape)),
                       jnp.float32)


def count(tree: Any) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def check_exact(spec: Spec, variables: dict[str, Any], node_id: str, keep: list[int],
                train: bool = False) -> tuple[Spec, dict[str, Any]]:
    """Remove units and check: validates, fewer params, matching shapes, identical outputs."""
    x = inputs(spec)
    before, _ = apply(spec, variables, x, train=train)
    new_spec, new_vars = remove_units(spec, variables, node_id, keep)
    validate(new_spec)
    model = build(new_spec)
    fresh = jax.eval_shape(model.init, jax.random.key(0))
    assert str(jax.tree.structure(fresh)) == str(jax.tree.structure(new_vars))
    for a, b in zip(jax.tree.leaves(fresh), jax.tree.leaves(new_vars), strict=True):
        assert a.shape == b.shape
    assert count(new_vars["params"]) < count(variables["params"])
    after, _ = apply(new_spec, new_vars, x, train=train)
    np.testing.assert_allclose(np.asarray(after), np.asarray(before), rtol=1e-5, atol=1e-5)
    return new_spec, new_vars


CONV_BN = make_spec([8, 8, 3], [
    n("c1", "conv2d", ["input"], filters=6),
    n("bn", "batch_norm", ["c1"]),
    n("relu", "activation", ["bn"]),
    n("pool", "max_pool2d", ["relu"]),
    n("flat", "flatten", ["pool"]),
    n("logits", "dense", ["flat"], units=3),
])


@pytest.mark.parametrize("train", [False, True])
def test_conv_bn_relu_pool_flatten_dense(train: bool) -> None:
    variables = random_variables(CONV_BN)
    zeroed = zero_units(CONV_BN, variables, "c1", [1, 4])
    new_spec, new_vars = check_exact(CONV_BN, zeroed, "c1", [0, 2, 3, 5], train=train)
    assert new_spec.node("c1").params["filters"] == 4
    np.testing.assert_array_equal(new_vars["batch_stats"]["bn"]["mean"],
                                  np.asarray(variables["batch_stats"]["bn"]["mean"])[[0, 2, 3, 5]])
    if train:  # the kept channels' statistics update exactly as before
        x = inputs(CONV_BN)
        _, old = apply(CONV_BN, zeroed, x, train=True)
        _, new = apply(new_spec, new_vars, x, train=True)
        np.testing.assert_allclose(new["bn"]["var"], np.asarray(old["bn"]["var"])[[0, 2, 3, 5]],
                                   rtol=1e-5)


def test_removing_live_units_changes_the_output() -> None:
    """Surgery really removes something: non-zero units, or a BN beta left on, change the logits."""
    variables = random_variables(CONV_BN)
    x = inputs(CONV_BN)
    before, _ = apply(CONV_BN, variables, x)
    new_spec, new_vars = remove_units(CONV_BN, variables, "c1", [0, 2, 3, 5])
    after, _ = apply(new_spec, new_vars, x)
    assert not np.allclose(after, before, atol=1e-3)
    # Only the conv's kernel and bias zeroed: BN turns the zero channel into a non-zero constant.
    conv_only = jax.tree.map(lambda a: a, variables)
    conv_only["params"]["c1"] = zero_units(CONV_BN, variables, "c1", [1, 4])["params"]["c1"]
    conv_only["params"]["bn"]["bias"] = jnp.ones(6)  # a positive constant survives the relu
    before, _ = apply(CONV_BN, conv_only, x)
    new_spec, new_vars = remove_units(CONV_BN, conv_only, "c1", [0, 2, 3, 5])
    after, _ = apply(new_spec, new_vars, x)
    assert not np.allclose(after, before, atol=1e-3)


def zero_by_hand(variables: dict[str, Any], node_id: str, units: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = jax.tree.map(lambda a: a, variables)
    p = dict(out["params"][node_id])
    p["kernel"] = p["kernel"].at[..., jnp.asarray(units)].set(0.0)
    p["bias"] = p["bias"].at[jnp.asarray(units)].set(0.0)
    out["params"][node_id] = p
    return out


def test_conv_to_conv() -> None:
    spec = make_spec([6, 6, 2], [
        n("c1", "conv2d", ["input"], filters=5),
        n("r1", "activation", ["c1"], fn="gelu"),
        n("c2", "conv2d", ["r1"], filters=4, kernel_size=[3, 1], strides=2),
        n("gap", "global_avg_pool", ["c2"]),
        n("logits", "dense", ["gap"], units=3),
    ])
    variables = zero_by_hand(random_variables(spec), "c1", [0, 3])
    _, new_vars = check_exact(spec, variables, "c1", [1, 2, 4])
    assert new_vars["params"]["c2"]["kernel"].shape == (3, 1, 3, 4)
    np.testing.assert_array_equal(new_vars["params"]["c2"]["kernel"],
                                  np.asarray(variables["params"]["c2"]["kernel"])[:, :, [1, 2, 4]])


def test_dense_to_dense() -> None:
    spec = make_spec([4, 3], [
        n("flat", "flatten", ["input"]),
        n("d1", "dense", ["flat"], units=7),
        n("act", "activation", ["d1"], fn="tanh"),
        n("drop", "dropout", ["act"], rate=0.3),
        n("logits", "dense", ["drop"], units=3),
    ])
    variables = zero_by_hand(random_variables(spec), "d1", [0, 5, 6])
    new_spec, _ = check_exact(spec, variables, "d1", [1, 2, 3, 4])
    assert new_spec.node("d1").params["units"] == 4


def test_conv1d_pool_flatten() -> None:
    spec = make_spec([12, 3], [
        n("c1", "conv1d", ["input"], filters=6, kernel_size=3),
        n("r", "activation", ["c1"]),
        n("pool", "avg_pool1d", ["r"], pool_size=2),
        n("flat", "flatten", ["pool"]),
        n("logits", "dense", ["flat"], units=3),
    ])
    variables = zero_by_hand(random_variables(spec), "c1", [2])
    check_exact(spec, variables, "c1", [0, 1, 3, 4, 5])


def test_sequence_through_position_embedding() -> None:
    spec = make_spec([5, 3], [
        n("d", "dense", ["input"], units=6),
        n("pos", "position_embedding", ["d"]),
        n("c", "conv1d", ["pos"], filters=4),
        n("gap", "global_avg_pool", ["c"]),
        n("logits", "dense", ["gap"], units=3),
    ])
    zeroed = zero_units(spec, random_variables(spec), "d", [1, 2])
    assert not np.any(zeroed["params"]["pos"]["embedding"][:, 1:3])
    _, new_vars = check_exact(spec, zeroed, "d", [0, 3, 4, 5])
    assert new_vars["params"]["pos"]["embedding"].shape == (5, 4)


def test_concat_offsets_channels() -> None:
    spec = make_spec([6, 6, 3], [
        n("a", "conv2d", ["input"], filters=4),
        n("b", "conv2d", ["input"], filters=3, kernel_size=1),
        n("cat", "concat", ["a", "b"]),
        n("pool", "avg_pool2d", ["cat"], pool_size=3),
        n("flat", "flatten", ["pool"]),
        n("logits", "dense", ["flat"], units=3),
    ])
    variables = random_variables(spec)
    _, new_vars = check_exact(spec, zero_by_hand(variables, "b", [1]), "b", [0, 2])
    kernel = np.asarray(variables["params"]["logits"]["kernel"])  # (2 * 2 * 7, 3)
    rows = [s * 7 + c for s in range(4) for c in (0, 1, 2, 3, 4, 6)]
    np.testing.assert_array_equal(new_vars["params"]["logits"]["kernel"], kernel[rows])
    check_exact(spec, zero_by_hand(variables, "a", [0, 3]), "a", [1, 2])


def test_residual_add_through_depthwise() -> None:
    spec = make_spec([6, 6, 2], [
        n("c1", "conv2d", ["input"], filters=4),
        n("r", "activation", ["c1"]),
        n("dw", "depthwise_conv2d", ["r"]),
        n("bn", "batch_norm", ["dw"]),
        n("sum", "add", ["r", "bn"]),
        n("gap", "global_max_pool", ["sum"]),
        n("logits", "dense", ["gap"], units=3),
    ])
    variables = random_variables(spec)
    zeroed = zero_units(spec, variables, "c1", [0, 2])
    assert not np.any(zeroed["params"]["bn"]["bias"][jnp.asarray([0, 2])])
    check_exact(spec, zeroed, "c1", [1, 3])


def test_add_with_unequal_inputs_is_rejected_and_many_at_once_works() -> None:
    spec = make_spec([5, 5, 2], [
        n("c1", "conv2d", ["input"], filters=4),
        n("r", "activation", ["c1"]),
        n("c2", "conv2d", ["r"], filters=4),
        n("sum", "add", ["r", "c2"]),
        n("gap", "global_avg_pool", ["sum"]),
        n("logits", "dense", ["gap"], units=3),
    ])
    variables = random_variables(spec)
    with pytest.raises(SpecError, match="add") as info:
        remove_units(spec, variables, "c1", [0, 1])
    assert info.value.node == "sum"
    zeroed = zero_units(spec, zero_units(spec, variables, "c1", [2, 3]), "c2", [2, 3])
    x = inputs(spec)
    before, _ = apply(spec, zeroed, x)
    new_spec, new_vars = remove_units_many(spec, zeroed, {"c1": [0, 1], "c2": [0, 1]})
    after, _ = apply(new_spec, new_vars, x)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
    assert new_vars["params"]["c2"]["kernel"].shape == (3, 3, 2, 2)


def test_separable_consumer_and_target() -> None:
    spec = make_spec([6, 6, 3], [
        n("c1", "conv2d", ["input"], filters=4),
        n("r", "activation", ["c1"], fn="relu6"),
        n("sep", "separable_conv2d", ["r"], filters=5, depth_multiplier=2),
        n("r2", "activation", ["sep"], fn="swish"),
        n("gap", "global_avg_pool", ["r2"]),
        n("logits", "dense", ["gap"], units=3),
    ])
    variables = random_variables(spec)
    _, new_vars = check_exact(spec, zero_units(spec, variables, "c1", [1]), "c1", [0, 2, 3])
    assert new_vars["params"]["sep"]["depthwise"]["kernel"].shape == (3, 3, 1, 6)
    assert new_vars["params"]["sep"]["pointwise"]["kernel"].shape == (1, 1, 6, 5)
    check_exact(spec, zero_units(spec, variables, "sep", [0, 4]), "sep", [1, 2, 3])


def test_depthwise_target_removes_whole_groups_and_their_producer() -> None:
    spec = make_spec([6, 6, 2], [
        n("c1", "conv2d", ["input"], filters=3),
        n("bn", "batch_norm", ["c1"]),
        n("dw", "depthwise_conv2d", ["bn"], depth_multiplier=2),
        n("r", "activation", ["dw"], fn="elu"),
        n("gap", "global_avg_pool", ["r"]),
        n("logits", "dense", ["gap"], units=3),
    ])
    variables = random_variables(spec)
    zeroed = zero_units(spec, variables, "dw", [2, 3])
    new_spec, new_vars = check_exact(spec, zeroed, "dw", [0, 1, 4, 5])
    assert new_spec.node("c1").params["filters"] == 2
    assert new_vars["params"]["dw"]["kernel"].shape == (3, 3, 1, 4)
    with pytest.raises(SpecError, match="whole groups"):
        remove_units(spec, variables, "dw", [0, 2, 3, 4, 5])


def test_rejections() -> None:
    variables = random_variables(CONV_BN)
    with pytest.raises(SpecError, match="output") as info:
        remove_units(CONV_BN, variables, "logits", [0, 1])
    assert info.value.node == "logits"
    for node_id, keep, message in [("bn", [0], "no units"), ("c1", [], "at least one"),
                                   ("c1", [0, 6], "distinct units"), ("nope", [0], "no such")]:
        with pytest.raises(SpecError, match=message):
            remove_units(CONV_BN, variables, node_id, keep)
    with pytest.raises(SpecError, match=r"\[0, 6\)"):  # not a silent no-op
        zero_units(CONV_BN, variables, "c1", [6])
    with pytest.raises(SpecError, match="no such"):
        zero_units(CONV_BN, variables, "nope", [0])
    # A layer whose channels reach the output through per-channel ops only.
    spec = make_spec([4], [n("d", "dense", ["input"], units=3), n("out", "activation", ["d"])])
    with pytest.raises(SpecError, match="classes"):
        remove_units(spec, random_variables(spec), "d", [0, 1])
    spec = make_spec([6, 4], [
        n("d", "dense", ["input"], units=4),
        n("ln", "layer_norm", ["d"]),
        n("gap", "global_avg_pool", ["ln"]),
        n("logits", "dense", ["gap"], units=3),
    ])
    with pytest.raises(SpecError, match="mixes channels"):
        remove_units(spec, random_variables(spec), "d", [0, 1])


def test_variables_that_do_not_fit_the_spec_raise() -> None:
    missing = random_variables(CONV_BN)
    del missing["params"]["bn"]
    misshapen = random_variables(CONV_BN)
    misshapen["params"]["logits"]["kernel"] = jnp.zeros((5, 3))
    for variables, message in ((missing, "missing params"), (misshapen, "logits/kernel")):
        with pytest.raises(CheckpointError, match=message):
            remove_units(CONV_BN, variables, "c1", [0, 1])
        with pytest.raises(CheckpointError, match=message):
            zero_units(CONV_BN, variables, "c1", [2])


def test_filter_norms() -> None:
    spec = make_spec([6, 6, 3], [
        n("c1", "conv2d", ["input"], filters=4),
        n("sep", "separable_conv2d", ["c1"], filters=5),
        n("gap", "global_avg_pool", ["sep"]),
        n("logits", "dense", ["gap"], units=3),
    ])
    variables = zero_units(spec, random_variables(spec), "c1", [2])
    kernel = np.asarray(variables["params"]["c1"]["kernel"]).reshape(-1, 4)
    np.testing.assert_allclose(filter_norms(variables, "c1"), np.abs(kernel).sum(0), rtol=1e-6)
    np.testing.assert_allclose(filter_norms(variables, "c1", ord=2),
                               np.linalg.norm(kernel, axis=0), rtol=1e-6)
    assert int(np.argmin(filter_norms(variables, "c1"))) == 2
    assert filter_norms(variables, "sep").shape == (5,)


def test_removable_nodes_are_the_unit_ops_whose_channels_can_be_followed() -> None:
    spec = make_spec([5, 5, 2], [
        n("c1", "conv2d", ["input"], filters=4),
        n("r", "activation", ["c1"]),
        n("c2", "conv2d", ["r"], filters=4),
        n("sum", "add", ["r", "c2"]),
        n("c3", "conv2d", ["sum"], filters=1),
        n("c4", "conv2d", ["c3"], filters=4),
        n("gap", "global_avg_pool", ["c4"]),
        n("h", "dense", ["gap"], units=5),
        n("logits", "dense", ["h"], units=3),
    ])
    # c1 and c2 feed an add, c3 has one unit, logits are the classes
    assert removable_nodes(spec) == ["c4", "h"]
