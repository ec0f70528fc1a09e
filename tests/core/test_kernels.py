"""core.kernels against the reference implementations (flax pooling, lax convolution)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from core import kernels

CHANNELS_LAST = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC")}
POOL_CASES = [
    ((2, 8, 8, 3), (2, 2), (2, 2)),   # windows tile the input
    ((2, 9, 11, 3), (2, 2), (2, 2)),  # ragged right/bottom edges
    ((2, 9, 11, 3), (3, 3), (2, 2)),  # overlapping windows
    ((2, 9, 11, 3), (2, 3), (3, 2)),  # gaps between windows on one axis
    ((2, 10, 4), (2,), (2,)),         # 1-D
    ((2, 10, 4), (3,), (1,)),
]


def _randn(rng: np.random.Generator, shape: tuple[int, ...]) -> jax.Array:
    return jnp.asarray(rng.normal(size=shape), jnp.float32)


@pytest.mark.parametrize(("shape", "window", "strides"), POOL_CASES)
def test_pools_match_flax_values_and_gradients(shape, window, strides):
    rng = np.random.default_rng(0)
    x = _randn(rng, shape)
    for ours, ref in [(kernels.max_pool, nn.max_pool), (kernels.avg_pool, nn.avg_pool)]:
        y, back = jax.vjp(lambda a, ours=ours: ours(a, window, strides), x)
        y_ref, back_ref = jax.vjp(lambda a, ref=ref: ref(a, window, strides, "VALID"), x)
        g = _randn(rng, y.shape)
        np.testing.assert_allclose(y, y_ref, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(back(g)[0], back_ref(g)[0], rtol=1e-6, atol=1e-6)


@settings(max_examples=10, deadline=None)
@given(h=st.integers(2, 9), w=st.integers(2, 9), kh=st.integers(1, 3), kw=st.integers(1, 3),
       sh=st.integers(1, 3), sw=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_max_pool_matches_flax_for_any_window(h, w, kh, kw, sh, sw, seed):
    kh, kw = min(kh, h), min(kw, w)
    rng = np.random.default_rng(seed)
    x = _randn(rng, (1, h, w, 2))
    y, back = jax.vjp(lambda a: kernels.max_pool(a, (kh, kw), (sh, sw)), x)
    y_ref, back_ref = jax.vjp(lambda a: nn.max_pool(a, (kh, kw), (sh, sw), "VALID"), x)
    g = _randn(rng, y.shape)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_allclose(back(g)[0], back_ref(g)[0], rtol=1e-6, atol=1e-6)


def test_max_pool_gradient_goes_to_the_first_of_tied_maxima():
    x = jnp.zeros((1, 4, 4, 2)).at[0, 3, 3, 1].set(-1.0)
    g = jnp.arange(1.0, 9.0).reshape(1, 2, 2, 2)
    dx = jax.vjp(lambda a: kernels.max_pool(a, (2, 2), (2, 2)), x)[1](g)[0]
    expected = jnp.zeros_like(x).at[0, ::2, ::2, :].set(g[0])  # top-left of each window
    np.testing.assert_array_equal(dx, expected)
    ref = jax.vjp(lambda a: nn.max_pool(a, (2, 2), (2, 2), "VALID"), x)[1](g)[0]
    np.testing.assert_array_equal(dx, ref)


def test_max_pool_with_nan_propagates_it_and_routes_each_cotangent_once():
    x = jnp.arange(16.0).reshape(1, 4, 4, 1).at[0, 0, 1, 0].set(jnp.nan)
    y, back = jax.vjp(lambda a: kernels.max_pool(a, (2, 2), (2, 2)), x)
    assert bool(jnp.isnan(y[0, 0, 0, 0])) and not bool(jnp.isnan(y[0, 1, 1, 0]))
    dx = back(jnp.ones_like(y))[0]
    np.testing.assert_array_equal(dx.reshape(2, 2, 2, 2).sum(axis=(1, 3)), jnp.ones((2, 2)))


CONV_CASES = [
    ((2, 10, 10, 1), (3, 3, 1, 5), (1, 1), "VALID"),        # fast path: one input channel
    ((2, 11, 9, 3), (3, 3, 3, 4), (2, 2), "SAME"),          # fast path: RGB, strided
    ((2, 9, 9, 2), (2, 3, 2, 4), (1, 2), ((1, 0), (2, -1))),  # explicit, asymmetric pads
    ((2, 12, 2), (5, 2, 3), (2,), "SAME"),                  # 1-D
    ((2, 8, 8, 6), (3, 3, 6, 4), (1, 1), "SAME"),           # many channels: lax itself
    ((2, 8, 8, 6), (3, 3, 1, 6), (1, 1), "SAME", 6),        # depthwise fast path
    ((2, 9, 7, 5), (5, 3, 1, 5), (2, 2), "SAME", 5),        # depthwise, strided, odd sizes
]


@pytest.mark.parametrize(("xs", "ks", "strides", "padding", "groups"),
                         [(*case, 1)[:5] for case in CONV_CASES])
def test_conv_matches_lax_values_and_gradients(xs, ks, strides, padding, groups):
    rng = np.random.default_rng(1)
    x, k = _randn(rng, xs), _randn(rng, ks)
    dn = CHANNELS_LAST[len(xs) - 2]

    def ours(a, b):
        return kernels.conv_general_dilated(a, b, strides, padding, dimension_numbers=dn,
                                            feature_group_count=groups)

    def ref(a, b):
        return lax.conv_general_dilated(a, b, strides, padding, dimension_numbers=dn,
                                        feature_group_count=groups,
                                        precision=lax.Precision.HIGHEST)

    y, back = jax.vjp(jax.jit(ours), x, k)
    y_ref, back_ref = jax.vjp(ref, x, k)
    g = _randn(rng, y.shape)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    for got, want in zip(back(g), back_ref(g), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_conv_passes_other_layouts_and_groups_through():
    rng = np.random.default_rng(2)
    x, k = _randn(rng, (2, 1, 8, 8)), _randn(rng, (4, 1, 3, 3))
    dn = ("NCHW", "OIHW", "NCHW")
    got = kernels.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=dn)
    want = lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=dn)
    np.testing.assert_array_equal(got, want)
    xg, kg = _randn(rng, (2, 8, 8, 2)), _randn(rng, (3, 3, 1, 4))
    got = kernels.conv_general_dilated(xg, kg, (1, 1), "SAME", dimension_numbers=CHANNELS_LAST[2],
                                       feature_group_count=2)
    want = lax.conv_general_dilated(xg, kg, (1, 1), "SAME", dimension_numbers=CHANNELS_LAST[2],
                                    feature_group_count=2)
    np.testing.assert_array_equal(got, want)


def test_conv_keeps_bfloat16():
    rng = np.random.default_rng(3)
    x, k = _randn(rng, (2, 8, 8, 1)), _randn(rng, (3, 3, 1, 4))
    dn = CHANNELS_LAST[2]
    got = kernels.conv_general_dilated(x.astype(jnp.bfloat16), k.astype(jnp.bfloat16), (1, 1),
                                       "VALID", dimension_numbers=dn)
    want = lax.conv_general_dilated(x, k, (1, 1), "VALID", dimension_numbers=dn)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(got.astype(jnp.float32), want, rtol=0.05, atol=0.1)


def test_flax_conv_with_the_kernel_equals_the_default():
    rng = np.random.default_rng(4)
    x = _randn(rng, (2, 9, 9, 1))
    default = nn.Conv(6, (3, 3), padding="SAME")
    fast = nn.Conv(6, (3, 3), padding="SAME", conv_general_dilated=kernels.conv_general_dilated)
    params = default.init(jax.random.key(0), x)

    def out(module, p):
        y: jax.Array = module.apply(p, x)
        return y

    def loss(module, p):
        return jnp.sum(jnp.sin(out(module, p)))

    np.testing.assert_allclose(out(fast, params), out(default, params), rtol=1e-5, atol=1e-5)
    g_fast = jax.grad(lambda p: loss(fast, p))(params)
    g_default = jax.grad(lambda p: loss(default, p))(params)
    for a, b in zip(jax.tree.leaves(g_fast), jax.tree.leaves(g_default), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


_FLAGS_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from core import kernels
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(8, 12, 12, 1)), jnp.float32)
    p = {k: jnp.asarray(rng.normal(size=s) * 0.3, jnp.float32) for k, s in
         [("k1", (3, 3, 1, 8)), ("b1", (8,)), ("k2", (3, 3, 8, 16)), ("w", (64, 10))]}
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(p):
        h = kernels.conv_general_dilated(x, p["k1"], (1, 1), "SAME", dimension_numbers=dn)
        h = kernels.max_pool(jax.nn.relu(h + p["b1"]), (2, 2), (2, 2))
        h = kernels.conv_general_dilated(h, p["k2"], (1, 1), "VALID", dimension_numbers=dn)
        h = kernels.avg_pool(jax.nn.relu(h), (2, 2), (2, 2)).reshape(8, -1)
        return jax.nn.logsumexp(h @ p["w"], axis=-1).sum()

    value, grads = jax.jit(jax.value_and_grad(loss))(p)
    out = {"loss": float(value), **{k: np.asarray(v).ravel().tolist() for k, v in grads.items()}}
    json.dump(out, sys.stdout)
""")


def _run_with_flags(flags: str) -> dict[str, list[float]]:
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", _FLAGS_SCRIPT], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    result: dict[str, list[float]] = json.loads(out.stdout)
    return result


def test_recommended_cpu_flags_leave_results_unchanged():
    plain = _run_with_flags("")
    tuned = _run_with_flags(" ".join(kernels.CPU_XLA_FLAGS))
    assert plain.keys() == tuned.keys()
    for name in plain:
        np.testing.assert_allclose(tuned[name], plain[name], rtol=1e-4, atol=1e-5, err_msg=name)
