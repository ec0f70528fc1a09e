"""Data parallelism: mesh, batch rounding, sharding, replication and prefetch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import parallel
from core.data import prefetch_to_device, train_batches
from core.model import build
from core.training import evaluate, predict_proba
from tests.core.specs import quadrant_data, tiny_spec


def test_mesh_spans_every_local_device_or_the_given_ones() -> None:
    assert parallel.data_mesh().size == jax.local_device_count() == 2
    one = parallel.data_mesh(jax.local_devices()[:1])
    assert one.size == 1 and one.axis_names == (parallel.AXIS,)
    with pytest.raises(ValueError):
        parallel.data_mesh([])


def test_round_batch_rounds_up_to_the_device_count() -> None:
    two, one = parallel.data_mesh(), parallel.data_mesh(jax.local_devices()[:1])
    assert [parallel.round_batch(b, two) for b in (1, 2, 3, 128)] == [2, 2, 4, 128]
    assert parallel.round_batch(3, one) == 3
    with pytest.raises(ValueError):
        parallel.round_batch(0, two)


def test_shard_batch_splits_rows_over_devices() -> None:
    mesh = parallel.data_mesh()
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    sharded = parallel.shard_batch(x, mesh)
    shards = sorted(sharded.addressable_shards, key=lambda s: s.index[0].start)
    assert [s.data.shape for s in shards] == [(3, 2), (3, 2)]
    np.testing.assert_array_equal(np.asarray(shards[1].data), x[3:])
    with pytest.raises(ValueError, match="divide"):
        parallel.shard_batch(x[:5], mesh)


def test_replicate_copies_so_donation_leaves_the_original_intact() -> None:
    mesh = parallel.data_mesh()
    original, host = jnp.arange(4.0), np.arange(4.0, dtype=np.float32)
    rep = parallel.replicate({"w": original, "h": host}, mesh)
    w = rep["w"]
    assert isinstance(w, jax.Array) and w.sharding.is_fully_replicated
    assert len(w.addressable_shards) == 2
    step = jax.jit(lambda t: {"w": t["w"] + 1, "h": t["h"] * 2}, donate_argnums=0)
    out = step(rep)
    np.testing.assert_array_equal(out["w"], [1, 2, 3, 4])
    np.testing.assert_array_equal(out["h"], [0, 2, 4, 6])
    np.testing.assert_array_equal(original, [0, 1, 2, 3])  # still alive and unchanged
    np.testing.assert_array_equal(host, [0, 1, 2, 3])


def test_prefetch_yields_every_batch_in_order_on_the_mesh() -> None:
    mesh = parallel.data_mesh()
    x, y = np.arange(20, dtype=np.float32)[:, None], np.arange(20)
    host = list(train_batches(x, y, 4, seed=0, epoch=1))
    device = list(prefetch_to_device(iter(host), mesh))
    assert len(device) == len(host) == 5
    for (hx, hy), (dx, dy) in zip(host, device, strict=True):
        np.testing.assert_array_equal(np.asarray(dx), hx)
        np.testing.assert_array_equal(np.asarray(dy), hy)
        assert dx.sharding == parallel.batch_sharded(mesh)


def test_evaluation_is_the_same_on_one_and_two_devices() -> None:
    model = build(tiny_spec())
    variables = model.init(jax.random.key(0))
    x, y = quadrant_data(9, seed=2)  # odd count: padded differently on 1 and 2 devices
    one = evaluate(model, variables, x, y, batch_size=4, devices=jax.local_devices()[:1])
    two = evaluate(model, variables, x, y, batch_size=4)
    assert one["accuracy"] == two["accuracy"]
    assert one["loss"] == pytest.approx(two["loss"], rel=1e-5)
    p1 = predict_proba(model, variables, x, devices=jax.local_devices()[:1])
    np.testing.assert_allclose(p1, predict_proba(model, variables, x), rtol=1e-5, atol=1e-6)
