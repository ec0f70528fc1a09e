"""Tests of core.evaluation.recalibrate: batch-norm statistics re-estimated on data."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import tree
from core.evaluation import recalibrate
from core.model import build
from core.spec import INPUT, InputSpec, Node, Spec


def _net(momentum: float, dropout: bool = False) -> Spec:
    nodes = [Node("fc", "dense", (INPUT,), {"units": 4}),
             Node("bn", "batch_norm", ("fc",), {"momentum": momentum}),
             Node("act", "activation", ("bn",), {"fn": "relu"})]
    if dropout:
        nodes.append(Node("drop", "dropout", ("act",), {"rate": 0.5}))
    nodes.append(Node("head", "dense", (nodes[-1].id,), {"units": 3}))
    return Spec(InputSpec((5,), modality="tabular"), tuple(nodes), "head", 3)


def _stale(spec: Spec) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """Variables whose stored statistics describe nothing, inputs, and the batch norm's true input statistics."""
    variables = build(spec).init(jax.random.key(0))
    variables["batch_stats"] = {"bn": {"mean": jnp.full(4, 7.0), "var": jnp.full(4, 50.0)}}
    x = np.random.default_rng(0).normal(2.0, 3.0, (96, 5)).astype(np.float32)
    p = variables["params"]["fc"]
    z = x @ np.asarray(p["kernel"]) + np.asarray(p["bias"])
    return variables, x, z


@pytest.mark.parametrize("momentum", [0.9, 0.5])
def test_the_statistics_become_those_of_the_batch_norms_input_on_the_data(momentum: float) -> None:
    spec = _net(momentum)
    variables, x, z = _stale(spec)
    out = recalibrate(build(spec), variables, x)
    np.testing.assert_allclose(out["batch_stats"]["bn"]["mean"], z.mean(axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["batch_stats"]["bn"]["var"], z.var(axis=0), rtol=1e-4, atol=1e-4)
    assert tree.flatten(out["params"]).keys() == tree.flatten(variables["params"]).keys()
    assert all(np.array_equal(a, b) for a, b in zip(tree.flatten(out["params"]).values(),
                                                   tree.flatten(variables["params"]).values(), strict=True))


def test_batches_of_equal_size_average_to_the_whole_datas_mean_and_dropout_is_handled() -> None:
    spec = _net(0.9, dropout=True)
    variables, x, z = _stale(spec)
    out = recalibrate(build(spec), variables, x, batch_size=32)
    np.testing.assert_allclose(out["batch_stats"]["bn"]["mean"], z.mean(axis=0), rtol=1e-4, atol=1e-4)
    per_batch = np.mean([z[i:i + 32].var(axis=0) for i in range(0, 96, 32)], axis=0)
    np.testing.assert_allclose(out["batch_stats"]["bn"]["var"], per_batch, rtol=1e-4, atol=1e-4)


def test_a_network_without_batch_norm_or_no_rows_comes_back_unchanged() -> None:
    spec = Spec(InputSpec((5,), modality="tabular"), (Node("head", "dense", (INPUT,), {"units": 3}),), "head", 3)
    model = build(spec)
    variables = model.init(jax.random.key(0))
    assert recalibrate(model, variables, np.ones((4, 5), np.float32)) is variables
    bn_spec = _net(0.9)
    bn_vars, _, _ = _stale(bn_spec)
    assert recalibrate(build(bn_spec), bn_vars, np.zeros((0, 5), np.float32)) is bn_vars
