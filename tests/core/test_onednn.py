"""core.onednn: oneDNN's convolutions against lax.conv_general_dilated, values and gradients."""

from __future__ import annotations

import platform
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from core import kernels, onednn

DIMS = ("NHWC", "HWIO", "NHWC")
BUILT_HERE = sys.platform == "linux" and platform.machine() == "x86_64"  # where the oneDNN wheels exist

CASES = [  # (x shape, kernel shape, strides, padding)
    ((2, 9, 9, 5), (3, 3, 5, 7), (1, 1), "SAME"),
    ((3, 10, 10, 8), (3, 3, 8, 6), (2, 2), "SAME"),  # stride 2 over an even side
    ((2, 11, 7, 6), (3, 3, 6, 4), (2, 2), "SAME"),   # odd sides: the last row and column are not used
    ((1, 8, 8, 16), (1, 1, 16, 32), (1, 1), "VALID"),
    ((2, 12, 9, 5), (5, 5, 5, 3), (2, 1), ((2, 1), (0, 3))),  # asymmetric explicit padding
    ((2, 7, 7, 5), (3, 1, 5, 5), (1, 1), "VALID"),
    ((4, 6, 6, 32), (3, 3, 32, 64), (1, 1), ((1, 1), (1, 1))),
]


def _reference(x: jax.Array, k: jax.Array, strides: tuple[int, int], padding: object) -> jax.Array:
    return lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=DIMS)  # type: ignore[arg-type]


def _ours(x: jax.Array, k: jax.Array, strides: tuple[int, int], padding: object) -> jax.Array:
    return kernels.conv_general_dilated(x, k, strides, padding, dimension_numbers=DIMS)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _needs_library() -> None:
    if not BUILT_HERE:
        pytest.skip("oneDNN wheels exist for x86-64 Linux only")


def test_the_library_is_built_and_loads() -> None:
    """``make install`` builds it; without it every convolution would silently stay with XLA."""
    assert onednn.LIBRARY.exists(), "run `make install` (python -m core.native.build)"
    assert onednn.available()


@pytest.mark.parametrize(("x_shape", "k_shape", "strides", "padding"), CASES)
def test_values_and_both_gradients_match_lax(x_shape: tuple[int, ...], k_shape: tuple[int, ...],
                                             strides: tuple[int, int], padding: object) -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(x_shape), jnp.float32)
    k = jnp.asarray(rng.standard_normal(k_shape), jnp.float32)
    want = _reference(x, k, strides, padding)
    got = jax.jit(_ours, static_argnums=(2, 3))(x, k, strides, padding)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    g = jnp.asarray(rng.standard_normal(want.shape), jnp.float32)

    def loss(f: object) -> object:
        return jax.jit(jax.grad(lambda a, b: jnp.sum(f(a, b, strides, padding) * g), argnums=(0, 1)))  # type: ignore[operator]

    (dx, dk), (dx0, dk0) = loss(_ours)(x, k), loss(_reference)(x, k)  # type: ignore[operator]
    np.testing.assert_allclose(dx, dx0, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dk, dk0, rtol=1e-5, atol=1e-3)


def test_convolutions_it_takes_and_those_it_leaves_to_xla() -> None:
    """Ungrouped 2-D float32 convolutions go to oneDNN; few input channels, depthwise, dilated, 1-D and
    float16 ones do not."""
    def calls_ffi(x_shape: tuple[int, ...], k_shape: tuple[int, ...], dtype: object = jnp.float32,
                  groups: int = 1, dilation: tuple[int, ...] | None = None) -> bool:
        x, k = jnp.zeros(x_shape, dtype), jnp.zeros(k_shape, dtype)  # type: ignore[arg-type]
        dims = DIMS if len(x_shape) == 4 else ("NWC", "WIO", "NWC")
        text = str(jax.make_jaxpr(lambda a, b: kernels.conv_general_dilated(
            a, b, (1,) * (len(x_shape) - 2), "SAME", rhs_dilation=dilation, dimension_numbers=dims,
            feature_group_count=groups))(x, k))
        return "ffi_call" in text

    assert calls_ffi((2, 8, 8, 16), (3, 3, 16, 32))
    assert not calls_ffi((2, 8, 8, 3), (3, 3, 3, 32))  # shifted slices (kernels.SMALL_CIN)
    assert not calls_ffi((2, 8, 8, 16), (3, 3, 1, 16), groups=16)  # depthwise: shifted slices
    assert not calls_ffi((2, 8, 8, 16), (3, 3, 16, 32), dilation=(2, 2))
    assert not calls_ffi((2, 8, 16), (3, 16, 32))
    assert not calls_ffi((2, 8, 8, 16), (3, 3, 16, 32), dtype=jnp.float16)


def test_vmap_runs_the_convolution_per_example() -> None:
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((3, 2, 6, 6, 8)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((3, 3, 8, 4)), jnp.float32)
    got = jax.vmap(lambda a: onednn.conv2d(a, k, (1, 1), ((1, 1), (1, 1))))(x)
    want = jnp.stack([_reference(a, k, (1, 1), "SAME") for a in x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
