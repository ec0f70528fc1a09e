"""Array kernels behind the layers where the obvious formulation is slow on XLA:CPU.

Pooling uses strided slices (or a reshape when windows tile the input) instead of
``lax.reduce_window``, whose gradient (select-and-scatter) is slow on CPU.
Inputs are channels-last with a leading batch axis: ``[N, *spatial, C]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax


def _windows(x: jax.Array, window: Sequence[int], strides: Sequence[int]) -> list[jax.Array]:
    """Return one strided view per window offset, each of the pooled output's shape."""
    spatial = x.shape[1:-1]
    out = [(n - k) // s + 1 for n, k, s in zip(spatial, window, strides, strict=True)]
    views = [x]
    for axis, (k, s, o) in enumerate(zip(window, strides, out, strict=True), start=1):
        nxt = []
        for v in views:
            for offset in range(k):
                start = [0] * v.ndim
                limit = list(v.shape)
                step = [1] * v.ndim
                start[axis], limit[axis], step[axis] = offset, offset + (o - 1) * s + 1, s
                nxt.append(lax.slice(v, start, limit, step))
        views = nxt
    return views


def _tiled(x: jax.Array, window: Sequence[int]) -> jax.Array:
    """Reshape ``[N, *spatial, C]`` to ``[N, o1, k1, o2, k2, ..., C]`` (drops a ragged edge)."""
    spatial = x.shape[1:-1]
    out = [n // k for n, k in zip(spatial, window, strict=True)]
    crop = tuple(slice(0, o * k) for o, k in zip(out, window, strict=True))
    x = x[(slice(None), *crop, slice(None))]
    shape = [x.shape[0]]
    for o, k in zip(out, window, strict=True):
        shape += [o, k]
    return x.reshape(*shape, x.shape[-1])


def _pool(
    x: jax.Array,
    window: Sequence[int],
    strides: Sequence[int],
    reduce: Callable[..., jax.Array],
    combine: Callable[[jax.Array, jax.Array], jax.Array],
    scale: bool,
) -> jax.Array:
    if tuple(window) == tuple(strides):
        tiles = _tiled(x, window)
        axes = tuple(range(2, tiles.ndim - 1, 2))
        return reduce(tiles, axis=axes)
    views = _windows(x, window, strides)
    acc = views[0]
    for v in views[1:]:
        acc = combine(acc, v)
    return acc / len(views) if scale else acc


def max_pool(x: jax.Array, window: Sequence[int], strides: Sequence[int]) -> jax.Array:
    """Max pooling with 'valid' padding over the spatial axes of ``[N, *spatial, C]``."""
    return _pool(x, window, strides, jnp.max, jnp.maximum, scale=False)


def avg_pool(x: jax.Array, window: Sequence[int], strides: Sequence[int]) -> jax.Array:
    """Average pooling with 'valid' padding over the spatial axes of ``[N, *spatial, C]``."""
    return _pool(x, window, strides, jnp.mean, jnp.add, scale=True)
