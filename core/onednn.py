"""2-D convolutions through oneDNN (the library PyTorch's CPU convolutions use), called from JAX.

XLA:CPU's convolutions train the image networks at about half of PyTorch's speed on two cores (its
kernels and their threading); ``native/onednn_conv.cc`` exposes oneDNN's forward, input-gradient and
kernel-gradient primitives as XLA FFI targets, and :func:`conv2d` joins them with a custom gradient.

:func:`available` says whether the compiled library (built by ``make install``: ``python -m
core.native.build``) loads; :func:`supports` which convolutions it takes (float32, 2-D, channels-last,
no dilation, one group). Everything else stays with ``lax``.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

LIBRARY = Path(__file__).resolve().parent / "native" / "libonednn_conv.so"
"""Where ``core.native.build`` puts the compiled FFI library."""

_TARGETS = {"forward": "OnednnConvForward", "data": "OnednnConvData", "filter": "OnednnConvFilter"}

Pads = tuple[tuple[int, int], tuple[int, int]]
DIMS = ("NHWC", "HWIO", "NHWC")


@functools.cache
def available() -> bool:
    """Load the FFI library and register its targets on CPU once; False when it is not built or fails
    to load (the caller then uses ``lax``)."""
    if not LIBRARY.exists():
        return False
    try:
        lib = ctypes.cdll.LoadLibrary(str(LIBRARY))
    except OSError:
        return False
    for name, symbol in _TARGETS.items():
        capsule = jax.ffi.pycapsule(getattr(lib, symbol))  # type: ignore[no-untyped-call]
        jax.ffi.register_ffi_target(f"onednn_conv_{name}", capsule, platform="cpu")
    return True


def supports(x: jax.Array, kernel: jax.Array, pads: Sequence[tuple[int, int]]) -> bool:
    """Whether :func:`conv2d` computes this undilated, ungrouped NHWC / HWIO convolution with explicit
    ``pads`` (else ``lax`` does): float32, 2-D, no negative padding, on the CPU, library built."""
    return (x.ndim == 4 and kernel.ndim == 4 and x.dtype == jnp.float32 and kernel.dtype == jnp.float32
            and x.shape[-1] == kernel.shape[-2] and len(pads) == 2 and min(min(p) for p in pads) >= 0
            and jax.default_backend() == "cpu" and available())


def _out_shape(x_shape: Sequence[int], k_shape: Sequence[int], strides: Sequence[int],
               pads: Pads) -> tuple[int, ...]:
    shape = lax.conv_general_shape_tuple(x_shape, k_shape, strides, pads, DIMS)  # type: ignore[no-untyped-call]
    return tuple(int(d) for d in shape)


def _attrs(strides: Sequence[int], pads: Pads, x_shape: Sequence[int], k_shape: Sequence[int],
           out: Sequence[int]) -> dict[str, np.ndarray]:
    """oneDNN's strides and (top, bottom, left, right) padding; the far padding is what the output uses
    (lax ignores rows past the last window, oneDNN wants them not asked for)."""
    far = [(out[1 + i] - 1) * strides[i] + k_shape[i] - x_shape[1 + i] - pads[i][0] for i in range(2)]
    return {"strides": np.asarray(strides, np.int64),
            "padding": np.asarray([pads[0][0], far[0], pads[1][0], far[1]], np.int64)}


def _struct(shape: Sequence[int]) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(shape), jnp.float32)  # type: ignore[no-untyped-call]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def conv2d(x: jax.Array, kernel: jax.Array, strides: tuple[int, int], pads: Pads) -> jax.Array:
    """``lax.conv_general_dilated(x, kernel, strides, pads, dimension_numbers=("NHWC", "HWIO",
    "NHWC"))`` through oneDNN; pads are explicit ``((top, bottom), (left, right))``, non-negative."""
    out = _out_shape(x.shape, kernel.shape, strides, pads)
    call = jax.ffi.ffi_call("onednn_conv_forward", _struct(out), vmap_method="sequential")
    return call(x, kernel, **_attrs(strides, pads, x.shape, kernel.shape, out))  # type: ignore[no-any-return]


def _forward(x: jax.Array, kernel: jax.Array, strides: tuple[int, int],
             pads: Pads) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return conv2d(x, kernel, strides, pads), (x, kernel)


def _backward(strides: tuple[int, int], pads: Pads, saved: tuple[jax.Array, jax.Array],
              g: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, kernel = saved
    attrs = _attrs(strides, pads, x.shape, kernel.shape, g.shape)
    dx = jax.ffi.ffi_call("onednn_conv_data", _struct(x.shape), vmap_method="sequential")(g, kernel, **attrs)
    dk = jax.ffi.ffi_call("onednn_conv_filter", _struct(kernel.shape), vmap_method="sequential")(x, g, **attrs)
    return dx, dk


conv2d.defvjp(_forward, _backward)
