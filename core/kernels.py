"""Array kernels behind the layers where the obvious formulation is slow on XLA:CPU.

* :func:`max_pool` / :func:`avg_pool` take the maximum (mean) of strided slices instead of
  ``lax.reduce_window`` (whose gradient, select-and-scatter, is slow on CPU) or a reshape (whose
  reduction XLA:CPU vectorises poorly). :func:`max_pool` has its own gradient: each window sends
  its cotangent to its first maximum, as ``select_and_scatter`` and PyTorch do.
* :func:`conv_general_dilated` is a drop-in for ``lax.conv_general_dilated`` (plug it into
  ``flax.linen.Conv(conv_general_dilated=...)``): on CPU, channels-last convolutions of inputs
  with at most :data:`SMALL_CIN` channels run as a sum of shifted, scaled slices (one fused
  element-wise loop, where XLA:CPU's convolution runs at a fraction of peak; their gradients are
  XLA's own), and so do depthwise convolutions (one filter per channel, where XLA:CPU's grouped
  convolution is 10-100x slower; gradients of the sum). Every other convolution is XLA's own.
* :data:`CPU_XLA_FLAGS` are the XLA:CPU flags with which these kernels were measured; a process
  that trains on CPU sets them in ``XLA_FLAGS`` before importing JAX (core never reads them).

Inputs are channels-last with a leading batch axis: ``[N, *spatial, C]``. The custom gradients
support reverse-mode differentiation (``jax.grad``, ``jax.vjp``), not forward mode (``jax.jvp``).
Measurements: ``bench/README.md``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from core import onednn

SMALL_CIN = 4
"""Largest input-channel count for which the shifted-slices convolution is used."""

CPU_XLA_FLAGS = (
    "--xla_cpu_experimental_ynn_fusion_type=dot,reduce",
    "--xla_cpu_prefer_vector_width=512",
)
"""XLA:CPU flags for training (YNNPACK for dots and reductions, 512-bit vectors)."""

Pads = tuple[tuple[int, int], ...]
_CHANNELS_LAST = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"),
                  3: ("NDHWC", "DHWIO", "NDHWC")}


# ----------------------------------------------------------------------------------- pooling


def _out_size(n: int, k: int, s: int) -> int:
    return (n - k) // s + 1


def _windows(x: jax.Array, window: Sequence[int], strides: Sequence[int]) -> list[jax.Array]:
    """Return one strided view per window offset (row-major order), each the pooled shape."""
    spatial = x.shape[1:-1]
    out = [_out_size(n, k, s) for n, k, s in zip(spatial, window, strides, strict=True)]
    views = []
    for offsets in itertools.product(*(range(k) for k in window)):
        start = (0, *offsets, 0)
        limit = (x.shape[0], *(o + (m - 1) * s + 1 for o, m, s in zip(offsets, out, strides,
                                                                     strict=True)), x.shape[-1])
        views.append(lax.slice(x, start, limit, (1, *strides, 1)))
    return views


def _max_of(views: list[jax.Array]) -> jax.Array:
    acc = views[0]
    for v in views[1:]:
        acc = jnp.maximum(acc, v)
    return acc


def _scatter(parts: list[jax.Array], shape: tuple[int, ...], window: Sequence[int],
             strides: Sequence[int]) -> jax.Array:
    """Place per-offset pooled-shape arrays back at their window offsets of ``shape`` (summing)."""
    zero = jnp.zeros((), parts[0].dtype)
    if tuple(window) == tuple(strides):  # windows tile the input: interleave, no additions
        rank = len(window)
        grid = dict(zip(itertools.product(*(range(k) for k in window)), parts, strict=True))
        for a in reversed(range(rank)):  # [N, o1, k1, ..., oa, ka, ..., C], last axis first
            grid = {key: jnp.stack([grid[(*key, j)] for j in range(window[a])], axis=a + 2)
                    for key in itertools.product(*(range(k) for k in window[:a]))}
        tiled = grid[()]
        out = parts[0].shape[1:-1]
        dense = tiled.reshape(shape[0], *(o * k for o, k in zip(out, window, strict=True)),
                              shape[-1])
        config = [(0, 0, 0), *((0, m - o * k, 0) for m, o, k in zip(shape[1:-1], out, window,
                                                                       strict=True)), (0, 0, 0)]
        return lax.pad(dense, zero, config)
    total = None
    for offsets, part in zip(itertools.product(*(range(k) for k in window)), parts, strict=True):
        config = [(0, 0, 0)]
        for off, m, o, s in zip(offsets, shape[1:-1], part.shape[1:-1], strides, strict=True):
            config.append((off, m - off - ((o - 1) * s + 1), s - 1))
        placed = lax.pad(part, zero, [*config, (0, 0, 0)])
        total = placed if total is None else total + placed
    assert total is not None
    return total


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _max_pool(x: jax.Array, window: tuple[int, ...], strides: tuple[int, ...]) -> jax.Array:
    return _max_of(_windows(x, window, strides))


def _max_pool_fwd(x: jax.Array, window: tuple[int, ...], strides: tuple[int, ...]
                  ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    y = _max_of(_windows(x, window, strides))
    return y, (x, y)


def _max_pool_bwd(window: tuple[int, ...], strides: tuple[int, ...],
                  res: tuple[jax.Array, jax.Array], g: jax.Array) -> tuple[jax.Array]:
    x, y = res
    views = _windows(x, window, strides)
    taken = jnp.zeros(y.shape, bool)
    parts = []
    for i, v in enumerate(views):
        # The last offset takes whatever no earlier one matched (NaN windows included), so each
        # window's cotangent goes to exactly one position.
        hit = ~taken if i == len(views) - 1 else (v == y) & ~taken
        taken = taken | hit
        parts.append(jnp.where(hit, g, jnp.zeros((), g.dtype)))
    return (_scatter(parts, x.shape, window, strides),)


_max_pool.defvjp(_max_pool_fwd, _max_pool_bwd)


def _avg(views: list[jax.Array]) -> jax.Array:
    acc = views[0]
    for v in views[1:]:
        acc = acc + v
    return acc / len(views)


def max_pool(x: jax.Array, window: Sequence[int], strides: Sequence[int]) -> jax.Array:
    """Max pooling with 'valid' padding over the spatial axes of ``[N, *spatial, C]``.

    The gradient goes to the first maximum of each window (row-major), as with
    ``flax.linen.max_pool`` and ``torch.nn.MaxPool2d``.
    """
    return _max_pool(x, tuple(window), tuple(strides))


def avg_pool(x: jax.Array, window: Sequence[int], strides: Sequence[int]) -> jax.Array:
    """Average pooling with 'valid' padding over the spatial axes of ``[N, *spatial, C]``."""
    return _avg(_windows(x, window, strides))


# ------------------------------------------------------------------------------- convolution


def _lax_conv(x: jax.Array, k: jax.Array, strides: tuple[int, ...], pads: Pads) -> jax.Array:
    return lax.conv_general_dilated(x, k, strides, pads,
                                    dimension_numbers=_CHANNELS_LAST[x.ndim - 2])


def _shifted_sum(x: jax.Array, k: jax.Array, strides: tuple[int, ...], pads: Pads) -> jax.Array:
    """Convolution as a sum over kernel taps and input channels of strided slices times rows."""
    window, cin = k.shape[:-2], k.shape[-2]
    x = lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0), *((lo, hi, 0) for lo, hi in pads),
                                            (0, 0, 0)])
    acc_dtype = jnp.promote_types(x.dtype, jnp.float32)
    views = _windows(x, window, strides)  # one per tap, in row-major tap order
    row = (1,) * (x.ndim - 1) + (k.shape[-1],)
    taps = k.reshape(-1, cin, k.shape[-1]).astype(acc_dtype)
    acc = None
    for t, v in enumerate(views):
        v = v.astype(acc_dtype)
        for c in range(cin):
            term = v[..., c:c + 1] * taps[t, c].reshape(row)
            acc = term if acc is None else acc + term
    assert acc is not None
    return acc.astype(jnp.result_type(x.dtype, k.dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _small_cin_conv(x: jax.Array, k: jax.Array, strides: tuple[int, ...], pads: Pads
                    ) -> jax.Array:
    return _shifted_sum(x, k, strides, pads)


def _small_cin_fwd(x: jax.Array, k: jax.Array, strides: tuple[int, ...], pads: Pads
                   ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return _shifted_sum(x, k, strides, pads), (x, k)


def _small_cin_bwd(strides: tuple[int, ...], pads: Pads, res: tuple[jax.Array, jax.Array],
                   g: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, k = res
    _, vjp = jax.vjp(lambda a, b: _lax_conv(a, b, strides, pads), x, k)
    dx, dk = vjp(g.astype(jnp.result_type(x.dtype, k.dtype)))
    return dx, dk


_small_cin_conv.defvjp(_small_cin_fwd, _small_cin_bwd)


def _depthwise(x: jax.Array, k: jax.Array, strides: tuple[int, ...], pads: Pads) -> jax.Array:
    """Depthwise convolution (one filter per channel) as a sum over taps of strided slices times the
    taps' per-channel weights; its gradients are those of that sum (slices, products, reductions)."""
    window, channels = k.shape[:-2], k.shape[-1]
    x = lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0), *((lo, hi, 0) for lo, hi in pads),
                                            (0, 0, 0)])
    dtype = jnp.result_type(x.dtype, k.dtype)
    taps = k.reshape(-1, *(1,) * (x.ndim - 1), channels).astype(dtype)
    acc = None
    for t, v in enumerate(_windows(x, window, strides)):
        term = v.astype(dtype) * taps[t]
        acc = term if acc is None else acc + term
    assert acc is not None
    return acc


def _is_channels_last(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any) -> bool:
    names = _CHANNELS_LAST.get(lhs.ndim - 2)
    if names is None or dimension_numbers is None:
        return False
    want = lax.conv_dimension_numbers(lhs.shape, rhs.shape, names)
    got = lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    return bool(got == want)


def _trivial(values: Sequence[int] | None) -> bool:
    return values is None or all(v == 1 for v in values)


def _explicit_pads(lhs: jax.Array, rhs: jax.Array, strides: tuple[int, ...],
                   padding: str | Sequence[tuple[int, int]]) -> Pads:
    pads = (lax.padtype_to_pads(lhs.shape[1:-1], rhs.shape[:-2], strides, padding)
            if isinstance(padding, str) else padding)
    return tuple((int(lo), int(hi)) for lo, hi in pads)


def conv_general_dilated(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> jax.Array:
    """``lax.conv_general_dilated`` with faster CPU formulations.

    Same arguments and results as :func:`jax.lax.conv_general_dilated`. On the CPU backend,
    channels-last, undilated convolutions run as fused sums of shifted slices when they are
    ungrouped with at most :data:`SMALL_CIN` input channels (gradients by XLA's convolutions) or
    depthwise with one filter per channel (gradients of the sum); other ungrouped 2-D float32 ones
    through oneDNN (:mod:`core.onednn`) where it is built; every other case is passed through
    unchanged. Usage: ``flax.linen.Conv(...,
    conv_general_dilated=kernels.conv_general_dilated)``.
    """
    common = (
        jax.default_backend() == "cpu"
        and _is_channels_last(lhs, rhs, dimension_numbers)
        and _trivial(lhs_dilation) and _trivial(rhs_dilation)
        and batch_group_count == 1 and preferred_element_type is None
    )
    cin = lhs.shape[-1]
    small = common and feature_group_count == 1 and rhs.shape[-2] <= SMALL_CIN
    depthwise = (common and feature_group_count == cin > 1 and rhs.shape[-2] == 1
                 and rhs.shape[-1] == cin)
    strides = tuple(int(s) for s in window_strides)
    pairs = _explicit_pads(lhs, rhs, strides, padding) if common else ()
    if (common and feature_group_count == 1 and not small and onednn.supports(lhs, rhs, pairs)):
        return onednn.conv2d(lhs, rhs, (strides[0], strides[1]), (pairs[0], pairs[1]))
    if not (small or depthwise):
        return lax.conv_general_dilated(
            lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
            feature_group_count, batch_group_count, precision, preferred_element_type)
    if depthwise:
        return _depthwise(lhs, rhs, strides, pairs)
    return _small_cin_conv(lhs, rhs, strides, pairs)


