"""Masks and shared weights: exact codebooks, per-bucket gradients, zeros that stay zero."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core.data import Dataset
from core.model import build
from core.reparam import (
    Reparam,
    codebook_of,
    constrain,
    mask_top_n_incoming,
    materialise,
    quantise,
    share,
    trainable,
    with_masks,
)
from core.spec import Spec


def rand(shape: tuple[int, ...], seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape).astype(np.float32))


def shared_setup(k: int = 6) -> tuple[dict[str, Any], Reparam, np.ndarray, np.ndarray]:
    """A trainable tree with one shared kernel (every bucket used) and one masked, unshared one."""
    rng = np.random.default_rng(1)
    codebook = rng.normal(size=k).astype(np.float32)
    idx = np.concatenate([np.arange(k), rng.integers(0, k, 4 * 5 - k)]).reshape(4, 5)
    idx = idx.astype(np.int32)
    mask = (rng.random((5, 3)) < 0.6).astype(np.float32)
    tree = {"a": {"kernel": jnp.asarray(codebook), "bias": rand((5,), 2)},
            "b": {"kernel": rand((5, 3), 3)}}
    reparam = Reparam(masks={"b/kernel": jnp.asarray(mask)}, indices={"a/kernel": jnp.asarray(idx)},
                      sizes={"a/kernel": k})
    return tree, reparam, idx, mask


def bits(x: Any) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def test_materialise_is_codebook_gather_bit_exact_and_codebook_of_recovers_it() -> None:
    tree, reparam, idx, mask = shared_setup()
    dense = materialise(tree, reparam)
    gathered = np.asarray(tree["a"]["kernel"])[idx]
    np.testing.assert_array_equal(bits(dense["a"]["kernel"]), bits(gathered))
    np.testing.assert_array_equal(bits(dense["a"]["bias"]), bits(tree["a"]["bias"]))
    np.testing.assert_array_equal(dense["b"]["kernel"], np.asarray(tree["b"]["kernel"]) * mask)
    recovered = codebook_of(dense["a"]["kernel"], jnp.asarray(idx), 6)
    np.testing.assert_array_equal(bits(recovered), bits(tree["a"]["kernel"]))
    again = trainable(dense, reparam)  # the round trip is exact, and jit gives the same
    for x, y in zip(jax.tree.leaves(again), jax.tree.leaves(tree), strict=True):
        assert x.shape == y.shape
    np.testing.assert_array_equal(bits(again["a"]["kernel"]), bits(tree["a"]["kernel"]))
    jitted = jax.jit(materialise)(tree, reparam)
    np.testing.assert_array_equal(bits(jitted["a"]["kernel"]), bits(dense["a"]["kernel"]))


def test_constrain_rezeroes_pruned_entries_of_unshared_leaves_only() -> None:
    tree, reparam, _, mask = shared_setup()
    revived = jax.tree.map(lambda x: x + 1.0, tree)  # e.g. an update that touched pruned entries
    fixed = constrain(revived, reparam)
    np.testing.assert_array_equal(fixed["b"]["kernel"], np.asarray(revived["b"]["kernel"]) * mask)
    np.testing.assert_array_equal(fixed["a"]["kernel"], revived["a"]["kernel"])
    np.testing.assert_array_equal(fixed["a"]["bias"], revived["a"]["bias"])
    dense = {"b": {"kernel": revived["b"]["kernel"]}}  # trainable starts with pruned entries at 0
    t = trainable(dense, Reparam(masks=reparam.masks))
    np.testing.assert_array_equal(t["b"]["kernel"], fixed["b"]["kernel"])


def test_codebook_of_ignores_pruned_zeros_and_empty_buckets() -> None:
    codebook = jnp.asarray([-1.5, 0.25, 3.0, 7.0])
    idx = jnp.asarray([[0, 1, 2], [2, 1, 0]])
    dense = codebook[idx] * jnp.asarray([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    np.testing.assert_array_equal(codebook_of(dense, idx, 4), [-1.5, 0.25, 3.0, 0.0])
    # Not yet shared: each bucket's mean of its non-zero values.
    raw = jnp.asarray([1.0, 2.0, 0.0, 5.0, -4.0])
    got = codebook_of(raw, jnp.asarray([0, 0, 0, 1, 1]), 2)
    np.testing.assert_allclose(got, [1.5, 0.5])


def test_codebook_gradient_is_the_segment_sum_of_dense_gradients() -> None:
    tree, reparam, idx, mask = shared_setup()
    target = rand((4, 5), 7)

    def loss_dense(params: dict[str, Any]) -> jax.Array:
        a, b = params["a"]["kernel"], params["b"]["kernel"]
        return jnp.sum(jnp.sin(a) * target) + jnp.sum(b**2)

    grads = jax.grad(lambda t: loss_dense(materialise(t, reparam)))(tree)
    dense_grads = jax.grad(loss_dense)(materialise(tree, reparam))
    expected = jax.ops.segment_sum(dense_grads["a"]["kernel"].ravel(), jnp.asarray(idx).ravel(), 6)
    np.testing.assert_allclose(grads["a"]["kernel"], expected, rtol=1e-6, atol=1e-7)
    assert np.all(np.asarray(grads["b"]["kernel"])[mask == 0] == 0.0)
    np.testing.assert_allclose(np.asarray(grads["b"]["kernel"])[mask == 1],
                               np.asarray(dense_grads["b"]["kernel"])[mask == 1])


def test_quantise_groups_similar_weights() -> None:
    rng = np.random.default_rng(0)
    centres = np.array([-1.0, 0.2, 2.0])
    which = rng.integers(0, 3, (6, 7))
    leaf = (centres[which] + rng.normal(0, 0.02, which.shape)).astype(np.float32)
    codebook, indices = quantise(leaf, 3)
    assert codebook.shape == (3,) and indices.shape == leaf.shape and indices.dtype == jnp.int32
    idx = np.asarray(indices)
    for c in range(3):  # one index per cluster, and different clusters get different indices
        assert len(set(idx[which == c].tolist())) == 1
    assert len(set(idx.ravel().tolist())) == 3
    np.testing.assert_allclose(np.sort(np.asarray(codebook)), centres, atol=0.02)


def test_quantise_reduces_distinct_values_deterministically() -> None:
    leaf = rand((8, 9, 3), 4)
    errors = []
    for k in (2, 4, 16):
        codebook, idx = quantise(leaf, k)
        shared = np.asarray(codebook)[np.asarray(idx)]
        assert len(np.unique(shared)) <= k
        errors.append(float(np.abs(shared - np.asarray(leaf)).mean()))
        again, idx2 = quantise(leaf, k)
        np.testing.assert_array_equal(again, codebook)
        np.testing.assert_array_equal(idx2, idx)
    assert errors[0] > errors[1] > errors[2]
    with pytest.raises(ValueError):
        quantise(leaf, 0)


def test_share_ignores_pruned_entries_and_trainable_takes_the_centroids() -> None:
    kernel = rand((6, 10), 5)
    params = {"d": {"kernel": kernel, "bias": rand((10,), 6)}}
    mask = mask_top_n_incoming(kernel, 3)
    reparam = share(params, with_masks(Reparam(), {"d/kernel": mask}), ["d/kernel"], 4)
    assert reparam.sizes == {"d/kernel": 4} and "d/kernel" in reparam.masks
    t = trainable(params, reparam)
    assert t["d"]["kernel"].shape == (4,)
    dense = np.asarray(materialise(t, reparam)["d"]["kernel"])
    assert np.all(dense[np.asarray(mask) == 0] == 0.0)
    live = dense[np.asarray(mask) == 1]
    assert len(np.unique(live)) <= 4
    kept = np.asarray(kernel)[np.asarray(mask) == 1]
    assert np.abs(live - kept).max() < 0.5 * np.abs(kept).max()  # centroids of the live weights
    with pytest.raises(KeyError):
        share(params, Reparam(), ["d/nope"], 4)
    with pytest.raises(KeyError):
        trainable(params, Reparam(masks={"e/kernel": mask}))


def test_mask_top_n_incoming_keeps_exactly_n_largest_per_output() -> None:
    for shape, n in [((12, 5), 3), ((3, 3, 4, 6), 5), ((3, 3, 1, 8), 2)]:
        kernel = np.asarray(rand(shape, 8))
        mask = np.asarray(mask_top_n_incoming(kernel, n)).reshape(-1, shape[-1])
        assert mask.dtype == np.float32 and set(np.unique(mask)) <= {0.0, 1.0}
        np.testing.assert_array_equal(mask.sum(axis=0), n)
        w = np.abs(kernel).reshape(-1, shape[-1])
        for j in range(shape[-1]):
            assert w[mask[:, j] == 1, j].min() >= w[mask[:, j] == 0, j].max()
    ties = np.asarray(mask_top_n_incoming(np.zeros((4, 3), np.float32), 2))
    np.testing.assert_array_equal(ties.sum(axis=0), 2)
    np.testing.assert_array_equal(mask_top_n_incoming(np.ones((4, 3), np.float32), 9), 1.0)


def test_with_masks_adds_and_replaces() -> None:
    first = with_masks(Reparam(indices={"x": jnp.zeros(2, jnp.int32)}, sizes={"x": 2}),
                       {"a": jnp.ones(2), "b": jnp.ones(2)})
    second = with_masks(first, {"b": jnp.zeros(2)})
    assert set(second.masks) == {"a", "b"} and set(second.indices) == {"x"}
    np.testing.assert_array_equal(second.masks["b"], 0.0)


def test_adamw_steps_keep_pruned_weights_exactly_zero() -> None:
    tree, reparam, _, mask = shared_setup()
    tree = trainable(materialise(tree, reparam), reparam)
    target = rand((4, 3), 9)
    opt = optax.adamw(0.05, weight_decay=0.5)
    state = opt.init(tree)

    @jax.jit
    def step(t: Any, s: Any, r: Reparam) -> tuple[Any, Any]:
        def loss(t: Any) -> jax.Array:
            p = materialise(t, r)
            pred = p["a"]["kernel"] @ p["b"]["kernel"] + p["a"]["bias"][:4, None]
            return jnp.sum((pred - target) ** 2)

        updates, s = opt.update(jax.grad(loss)(t), s, t)
        return constrain(optax.apply_updates(t, updates), r), s

    start = np.asarray(tree["b"]["kernel"])
    for _ in range(5):
        tree, state = step(tree, state, reparam)
    b = np.asarray(tree["b"]["kernel"])
    assert np.all(b[mask == 0] == 0.0)
    assert np.all(b[mask == 1] != start[mask == 1])
    dense = materialise(tree, reparam)["a"]["kernel"]
    assert len(np.unique(np.asarray(dense))) <= 6


def test_training_keeps_pruned_weights_zero_and_shared_weights_shared() -> None:
    """Through core.training: top-N pruning of the dense layer, 3 shared values for the conv."""
    from core.training import TrainConfig, train

    spec = Spec.from_dict({
        "input": {"shape": [6, 6, 1]},
        "nodes": [{"id": "conv", "op": "conv2d", "inputs": ["input"], "params": {"filters": 3}},
                  {"id": "relu", "op": "activation", "inputs": ["conv"]},
                  {"id": "flat", "op": "flatten", "inputs": ["relu"]},
                  {"id": "out", "op": "dense", "inputs": ["flat"], "params": {"units": 4}}],
        "output": {"node": "out", "num_classes": 4},
    })
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 96).astype(np.int32)
    x = rng.normal(0.0, 0.3, (96, 6, 6, 1)).astype(np.float32)
    for cls, (r, c) in enumerate([(0, 0), (0, 3), (3, 0), (3, 3)]):
        x[y == cls, r : r + 3, c : c + 3] += 1.0
    data = Dataset(x[:64], y[:64], x[64:], y[64:])
    model = build(spec)
    variables = model.init(jax.random.key(0))
    kernel = variables["params"]["out"]["kernel"]
    mask = mask_top_n_incoming(kernel, 10)
    reparam = share(variables["params"], with_masks(Reparam(), {"out/kernel": mask}),
                    ["conv/kernel"], 3)
    config = TrainConfig(epochs=2, batch_size=16, patience=None, weight_decay=0.5,
                         learning_rate=1e-2)
    result = train(model, data, config, variables=variables, reparam=reparam)
    out = np.asarray(result.variables["params"]["out"]["kernel"])
    assert np.all(out[np.asarray(mask) == 0] == 0.0)
    assert np.all((out != 0).sum(axis=0) <= 10)
    assert not np.allclose(out[np.asarray(mask) == 1], np.asarray(kernel)[np.asarray(mask) == 1])
    conv = np.asarray(result.variables["params"]["conv"]["kernel"])
    codebook = np.asarray(result.trainable["conv"]["kernel"])
    idx = np.asarray(reparam.indices["conv/kernel"])
    np.testing.assert_array_equal(bits(conv), bits(codebook[idx]))
    assert len(np.unique(conv)) <= 3
    start = np.asarray(trainable(variables["params"], reparam)["conv"]["kernel"])
    assert not np.allclose(codebook, start)  # the shared values did train
