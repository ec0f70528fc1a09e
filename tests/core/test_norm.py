"""core.norm.BatchNorm against flax.linen.BatchNorm: variables, values, running averages, gradients."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from core import norm


def _pair(momentum: float = 0.9) -> tuple[nn.Module, nn.Module]:
    return (norm.BatchNorm(use_running_average=False, momentum=momentum, epsilon=1e-5),
            nn.BatchNorm(use_running_average=False, momentum=momentum, epsilon=1e-5))


@pytest.mark.parametrize("shape", [(8, 5, 5, 6), (16, 12, 4), (32, 3)])
def test_training_mode_matches_linen_in_values_statistics_and_gradients(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(shape) * 3 + 1, jnp.float32)
    ours, linen = _pair()
    variables = linen.init(jax.random.key(0), x)
    assert str(jax.tree.structure(ours.init(jax.random.key(0), x))) == str(jax.tree.structure(variables))
    params = {"scale": jnp.asarray(rng.uniform(0.5, 2, shape[-1]), jnp.float32),
              "bias": jnp.asarray(rng.standard_normal(shape[-1]), jnp.float32)}
    weights = jnp.asarray(rng.standard_normal(shape), jnp.float32)

    def loss(module: nn.Module, p: dict[str, jax.Array], a: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        y, new = module.apply({"params": p, "batch_stats": variables["batch_stats"]}, a, mutable=["batch_stats"])
        return jnp.sum(jax.nn.relu(y) * weights), new["batch_stats"]

    (value, stats), grads = jax.value_and_grad(lambda p, a: loss(ours, p, a), argnums=(0, 1), has_aux=True)(
        params, x)
    (want, want_stats), want_grads = jax.value_and_grad(lambda p, a: loss(linen, p, a), argnums=(0, 1),
                                                        has_aux=True)(params, x)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-4)
    for key in ("mean", "var"):
        np.testing.assert_allclose(stats[key], want_stats[key], rtol=1e-5, atol=1e-6)
    for got, ref in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_inference_mode_uses_the_running_statistics_as_linen_does() -> None:
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((4, 3, 3, 5)), jnp.float32)
    variables = nn.BatchNorm(use_running_average=True).init(jax.random.key(0), x)
    variables = jax.tree.map(lambda v: v + jnp.asarray(rng.uniform(0.1, 1, v.shape), jnp.float32), variables)
    got = np.asarray(norm.BatchNorm(use_running_average=True).apply(variables, x))
    want = np.asarray(nn.BatchNorm(use_running_average=True).apply(variables, x))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_the_hand_written_gradient_is_the_derivative_of_all_three_outputs() -> None:
    """Through y and through the statistics (which feed the running averages), by finite differences."""
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((6, 4, 3)), jnp.float32)
    scale = jnp.asarray(rng.uniform(0.5, 2, 3), x.dtype)
    bias = jnp.asarray(rng.standard_normal(3), x.dtype)
    probe = [jnp.asarray(rng.standard_normal(s), x.dtype) for s in ((6, 4, 3), (3,), (3,))]

    def scalar(a: jax.Array, s: jax.Array, b: jax.Array) -> jax.Array:
        outs = norm.batch_norm(a, s, b, 1e-3)
        return sum(jnp.sum(o * w) for o, w in zip(outs, probe, strict=True))  # type: ignore[return-value]

    check_grads(scalar, (x, scale, bias), order=1, modes=("rev",), atol=2e-2, rtol=2e-2)
