"""Batch normalisation with a hand-written gradient for training mode.

:class:`BatchNorm` keeps ``flax.linen.BatchNorm``'s parameters (``scale``, ``bias``), statistics
(``batch_stats``: ``mean``, ``var``), momentum update and fast variance (``E[x^2] - E[x]^2``), so
checkpoints, surgery and export address it as before. What differs is the gradient: XLA:CPU
differentiates linen's formulation into about six full passes over the activations per layer;
:func:`batch_norm` makes one pass for the statistics and one to normalise forward, one for two sums and
one for the input gradient backward, as PyTorch's CPU kernel does.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax


def _rows(v: jax.Array, x: jax.Array) -> jax.Array:
    """``v`` [C] shaped to broadcast against ``x`` [..., C] (explicitly: the tests forbid rank promotion)."""
    return v.reshape((1,) * (x.ndim - 1) + (-1,))


def _stats(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    axes = tuple(range(x.ndim - 1))
    mean = jnp.mean(x, axis=axes)
    return mean, jnp.maximum(jnp.mean(jnp.square(x), axis=axes) - jnp.square(mean), 0.0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def batch_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, epsilon: float
               ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Normalise float32 channels-last ``x`` by its batch statistics over every axis but the last, then
    scale and shift; return ``(y, mean, var)`` (the biased variance, as linen's)."""
    mean, var = _stats(x)
    mul = scale * lax.rsqrt(var + epsilon)
    return x * _rows(mul, x) + _rows(bias - mean * mul, x), mean, var


def _forward(x: jax.Array, scale: jax.Array, bias: jax.Array, epsilon: float
             ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], tuple[jax.Array, ...]]:
    out = batch_norm(x, scale, bias, epsilon)
    return out, (x, scale, out[1], out[2])


def _backward(epsilon: float, saved: tuple[jax.Array, ...],
              cotangents: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
    x, scale, mean, var = saved
    g, g_mean, g_var = cotangents
    count = x.size // x.shape[-1]
    inv = lax.rsqrt(var + epsilon)
    axes = tuple(range(x.ndim - 1))
    g_bias = jnp.sum(g, axis=axes)
    g_scale = inv * (jnp.sum(g * x, axis=axes) - mean * g_bias)
    # d/dx of y, and of the mean and variance outputs (they feed the running averages only, but stay exact)
    a = scale * inv
    b = -a * (g_bias - inv * mean * g_scale) / count + g_mean / count - 2.0 * mean * g_var / count
    c = -a * inv * g_scale / count + 2.0 * g_var / count
    return g * _rows(a, x) + x * _rows(c, x) + _rows(b, x), g_scale, g_bias


batch_norm.defvjp(_forward, _backward)


class BatchNorm(nn.Module):
    """``flax.linen.BatchNorm`` over the last axis (same variables and updates), trained through
    :func:`batch_norm`."""

    use_running_average: bool
    momentum: float = 0.99
    epsilon: float = 1e-5
    dtype: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Normalise ``[N, ..., C]`` by the batch (training) or the running statistics."""
        features = (x.shape[-1],)
        ra_mean = self.variable("batch_stats", "mean", jnp.zeros, features, jnp.float32)
        ra_var = self.variable("batch_stats", "var", jnp.ones, features, jnp.float32)
        scale = self.param("scale", nn.initializers.ones, features, jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, features, jnp.float32)
        dtype = self.dtype or jnp.result_type(x, scale)
        if self.use_running_average:
            mul = scale * lax.rsqrt(ra_var.value + self.epsilon)
            return ((x - _rows(ra_mean.value, x)) * _rows(mul, x) + _rows(bias, x)).astype(dtype)
        y, mean, var = batch_norm(x.astype(jnp.float32), scale, bias, self.epsilon)
        if not self.is_initializing():
            ra_mean.value = self.momentum * ra_mean.value + (1 - self.momentum) * mean
            ra_var.value = self.momentum * ra_var.value + (1 - self.momentum) * var
        return y.astype(dtype)
