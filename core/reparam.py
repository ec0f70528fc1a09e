"""Compression reparameterisation: binary masks and shared weights (codebook + index array).

A :class:`Reparam` says, per flat parameter path (see :mod:`core.tree`), which entries are pruned
(``masks``) and which leaves share weights (``indices`` into a codebook of ``sizes[path]`` values).
Training works on a *trainable* pytree in which each shared leaf is replaced by its codebook; the
model's dense parameters are obtained from it with :func:`materialise`.

Pruned entries are zero in the forward pass and get zero gradient (``materialise`` selects them
away), and :func:`constrain` re-zeroes them after each optimiser update, so they stay exactly zero.
A shared leaf is ``codebook[indices]``; its codebook's gradient is the sum of the dense gradients
of each bucket, as in Deep Compression (Han et al., 2016, https://arxiv.org/abs/1510.00149).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core.tree import SEP, flatten


@dataclass(frozen=True)
class Reparam:
    """Masks and weight-sharing indices of a network's parameters, keyed by flat path.

    ``masks[path]``: 0/1 array (the parameter's dtype) of the parameter's shape; 0 = pruned.
    ``indices[path]``: int32 array of the parameter's shape, values in ``[0, sizes[path])``.
    ``sizes[path]``: number of codebook entries (k) of a shared parameter.
    """

    masks: Mapping[str, jax.Array] = field(default_factory=dict)
    indices: Mapping[str, jax.Array] = field(default_factory=dict)
    sizes: Mapping[str, int] = field(default_factory=dict)


def _flatten_reparam(r: Reparam) -> tuple[tuple[dict[str, jax.Array], dict[str, jax.Array]],
                                          tuple[tuple[str, int], ...]]:
    return (dict(r.masks), dict(r.indices)), tuple(sorted(r.sizes.items()))


def _unflatten_reparam(sizes: tuple[tuple[str, int], ...],
                       children: tuple[dict[str, jax.Array], dict[str, jax.Array]]) -> Reparam:
    masks, indices = children
    return Reparam(masks, indices, dict(sizes))


# Registered as a pytree (arrays are leaves, ``sizes`` is static) so that a Reparam can be passed
# as an argument of a jitted function.
jax.tree_util.register_pytree_node(Reparam, _flatten_reparam, _unflatten_reparam)


def _map_paths(tree: Mapping[str, Any], fn: Callable[[str, Any], Any], prefix: str = "") -> Any:
    """Return ``tree`` rebuilt with each leaf replaced by ``fn(path, leaf)`` (structure kept)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{SEP}{key}" if prefix else key
        out[key] = _map_paths(value, fn, path) if isinstance(value, Mapping) else fn(path, value)
    return out


def _check_paths(tree: Mapping[str, Any], reparam: Reparam) -> None:
    missing = sorted((set(reparam.masks) | set(reparam.indices)) - set(flatten(tree)))
    if missing:
        raise KeyError(f"the reparam names parameters that do not exist: {missing}")


def _masked(leaf: jax.Array, mask: jax.Array) -> jax.Array:
    """Return ``leaf`` with the entries where ``mask`` is 0 set to exactly 0 (no gradient there)."""
    return jnp.where(mask != 0, leaf, jnp.zeros((), leaf.dtype))


def trainable(params: Mapping[str, Any], reparam: Reparam) -> dict[str, Any]:
    """Return the pytree that training updates: each shared leaf replaced by its codebook (k,).

    Unshared masked leaves have their pruned entries zeroed. A shared leaf's codebook is
    :func:`codebook_of` its (masked) dense values: exact when ``params`` is materialised, the
    bucket means (k-means centroids) when it is not, e.g. right after :func:`share`. Computed on the host
    (:func:`host_codebook`): through JAX, each leaf shape compiled its own small programs (about 4 s of a
    52-leaf residual network's retraining on digits).
    """
    _check_paths(params, reparam)

    def leaf(path: str, value: Any) -> Any:
        if path not in reparam.masks and path not in reparam.indices:
            return value
        x = np.asarray(value)
        if path in reparam.masks:
            x = np.where(np.asarray(reparam.masks[path]) != 0, x, np.zeros((), x.dtype))
        if path in reparam.indices:
            x = host_codebook(x, np.asarray(reparam.indices[path]), reparam.sizes[path])
        return jnp.asarray(x)

    out: dict[str, Any] = _map_paths(params, leaf)
    return out


def materialise(trainable: Mapping[str, Any], reparam: Reparam) -> dict[str, Any]:
    """Return the model's dense parameters: ``codebook[indices]`` for shared leaves, then masked.

    Pure and jit-able. Gradients flow back to each codebook entry as the sum over its bucket and
    are zero for pruned entries.
    """

    def leaf(path: str, value: Any) -> Any:
        if path in reparam.indices:
            value = jnp.asarray(value)[reparam.indices[path]]
        if path in reparam.masks:
            value = _masked(jnp.asarray(value), reparam.masks[path])
        return value

    out: dict[str, Any] = _map_paths(trainable, leaf)
    return out


def constrain(trainable: Mapping[str, Any], reparam: Reparam) -> dict[str, Any]:
    """Return ``trainable`` with the pruned entries of unshared leaves set back to exactly 0.

    Apply after every optimiser update (weight decay or momentum could otherwise revive them).
    """

    def leaf(path: str, value: Any) -> Any:
        if path in reparam.masks and path not in reparam.indices:
            return _masked(jnp.asarray(value), reparam.masks[path])
        return value

    out: dict[str, Any] = _map_paths(trainable, leaf)
    return out


def codebook_of(dense: jax.Array, indices: jax.Array, k: int) -> jax.Array:
    """Return the ``k`` codebook values of a shared leaf from its dense values, shape ``(k,)``.

    Zero entries (pruned) are ignored. A bucket whose non-zero entries are all equal yields that
    value exactly (so ``codebook_of(codebook[indices], indices, k)`` recovers the codebook); other
    buckets yield their mean; empty buckets yield 0. Jit-able.
    """
    x = jnp.ravel(dense)
    seg = jnp.ravel(indices)
    live = x != 0
    zero = jnp.zeros((), x.dtype)
    count = jax.ops.segment_sum(live.astype(jnp.int32), seg, num_segments=k)
    total = jax.ops.segment_sum(jnp.where(live, x, zero), seg, num_segments=k)
    inf = jnp.full((), jnp.inf, x.dtype)
    hi = jax.ops.segment_max(jnp.where(live, x, -inf), seg, num_segments=k)
    lo = jax.ops.segment_min(jnp.where(live, x, inf), seg, num_segments=k)
    mean = total / jnp.maximum(count, 1).astype(x.dtype)
    return jnp.where(count == 0, zero, jnp.where(hi == lo, hi, mean))


FIT_SAMPLE = 1 << 17
"""Kept values beyond which :func:`quantise` fits its centroids on this many of them drawn at random (fixed seed):
an SMS Spam network's 8.4M-entry embedding table took seconds per k to sort."""


def quantise(leaf: Any, k: int, *, iters: int = 30, mask: Any | None = None,
             centroids: np.ndarray | None = None) -> tuple[jax.Array, jax.Array]:
    """Cluster a leaf's values into ``k`` shared values by 1-D k-means (Lloyd's algorithm).

    Returns ``(codebook (k,), indices)`` with ``indices`` int32 of the leaf's shape, each entry
    the nearest codebook value. Centroids start evenly spaced between the minimum and maximum
    (linear initialisation, which Han et al., 2016 found best as it keeps the rare large weights),
    so the result is deterministic. Entries where ``mask`` is 0 do not move the centroids. Each iteration costs
    O(k log n) on the sorted values (a cluster of 1-D k-means is an interval of them); a leaf of more than
    :data:`FIT_SAMPLE` kept values is fitted on a fixed random sample of them (its extremes still set the start).
    ``centroids``: the leaf's :func:`fit_centroids` when the caller has them already (not fitted again).
    """
    arr = np.asarray(leaf)
    w = arr.astype(np.float64).ravel()
    if centroids is None:
        centroids = fit_centroids(w if mask is None else w[np.asarray(mask).ravel() != 0], k, iters)
    if centroids is None:
        return jnp.zeros((k,), arr.dtype), jnp.zeros(arr.shape, jnp.int32)
    indices = nearest(w, centroids).reshape(arr.shape).astype(np.int32)
    return jnp.asarray(centroids, arr.dtype), jnp.asarray(indices)


def fit_centroids(values: np.ndarray, k: int, iters: int = 30) -> np.ndarray | None:
    """The ``k`` sorted centroids :func:`quantise` fits to ``values`` (1-D, float64); None when there are none."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if values.size == 0:
        return None
    low, high = values.min(), values.max()
    if values.size > FIT_SAMPLE:
        values = values[np.random.default_rng(0).integers(0, values.size, FIT_SAMPLE)]
    ordered = np.sort(values)  # each cluster is a run of the sorted values: its sum is a difference of prefix sums
    prefix = np.concatenate([[0.0], np.cumsum(ordered)])
    centroids = np.linspace(low, high, k)
    for _ in range(iters):
        bounds = np.concatenate([[0], np.searchsorted(ordered, (centroids[1:] + centroids[:-1]) / 2, side="right"),
                                 [ordered.size]])
        counts = np.diff(bounds)
        sums = prefix[bounds[1:]] - prefix[bounds[:-1]]
        updated = np.sort(np.where(counts > 0, sums / np.maximum(counts, 1), centroids))
        if np.array_equal(updated, centroids):
            break
        centroids = updated
    return centroids


def shared_leaf(leaf: Any, k: int, mask: Any | None = None,
                centroids: np.ndarray | None = None) -> tuple[jax.Array, jax.Array]:
    """``(indices, dense leaf)`` of one leaf shared among ``k`` values: :func:`quantise`'s indices (from
    ``centroids`` when given), and the dense leaf that ``materialise(trainable(...))`` gives for it (each bucket at
    :func:`codebook_of` its live values, pruned entries 0), computed on the host (:func:`host_start`)."""
    _, idx = quantise(leaf, k, mask=mask, centroids=centroids)
    one = Reparam({"leaf": mask} if mask is not None else {}, {"leaf": idx}, {"leaf": k})
    return idx, jnp.asarray(host_start({"leaf": leaf}, one)["leaf"])


def host_start(params: Mapping[str, Any], reparam: Reparam) -> dict[str, Any]:
    """``materialise(trainable(params, reparam), reparam)`` computed with NumPy (NumPy arrays; equal up to the
    rounding of each bucket's mean, summed here in float64).

    Through JAX, every small operation of it compiles for each leaf shape: a compression's per-layer search on
    digits spent about 6 s compiling them, and jitting the whole of it cost 3-5 s of compilation per network."""

    def leaf(path: str, value: Any) -> Any:
        x = np.asarray(value)
        keep = np.asarray(reparam.masks[path]) != 0 if path in reparam.masks else None
        if keep is not None:
            x = np.where(keep, x, np.zeros((), x.dtype))
        if path in reparam.indices:
            x = host_codebook(x, np.asarray(reparam.indices[path]), reparam.sizes[path])[
                np.asarray(reparam.indices[path])]
            if keep is not None:
                x = np.where(keep, x, np.zeros((), x.dtype))
        return x

    _check_paths(params, reparam)
    out: dict[str, Any] = _map_paths(params, leaf)
    return out


def host_codebook(dense: np.ndarray, indices: np.ndarray, k: int) -> np.ndarray:
    """:func:`codebook_of` with NumPy: each bucket's mean of its non-zero entries (its value exactly when they are
    all equal), 0 for an empty bucket."""
    x, seg = dense.ravel(), indices.ravel()
    live = x != 0
    seg, values = seg[live], x[live]
    count = np.bincount(seg, minlength=k)
    mean = (np.bincount(seg, weights=values, minlength=k) / np.maximum(count, 1)).astype(x.dtype)
    hi, lo = np.full(k, -np.inf, x.dtype), np.full(k, np.inf, x.dtype)
    np.maximum.at(hi, seg, values)
    np.minimum.at(lo, seg, values)
    out: np.ndarray = np.where(count == 0, np.zeros((), x.dtype), np.where(hi == lo, hi, mean)).astype(x.dtype)
    return out


def nearest(values: np.ndarray, sorted_centroids: np.ndarray) -> np.ndarray:
    """Return the index of the nearest centroid of each value (centroids sorted ascending)."""
    mids = (sorted_centroids[1:] + sorted_centroids[:-1]) / 2
    return np.searchsorted(mids, values).astype(np.int64)


def share(params: Mapping[str, Any], reparam: Reparam, paths: Iterable[str], k: int, *,
          iters: int = 30) -> Reparam:
    """Return ``reparam`` with the leaves at ``paths`` shared among ``k`` values each.

    Indices come from :func:`quantise` (pruned entries ignored); the codebooks themselves are
    taken from the parameters by :func:`trainable`.
    """
    leaves = flatten(params)
    indices, sizes = dict(reparam.indices), dict(reparam.sizes)
    for path in paths:
        if path not in leaves:
            raise KeyError(f"no parameter '{path}' to share")
        _, indices[path] = quantise(leaves[path], k, iters=iters, mask=reparam.masks.get(path))
        sizes[path] = k
    return Reparam(reparam.masks, indices, sizes)


def mask_top_n_incoming(kernel: Any, n: int) -> jax.Array:
    """Return a 0/1 mask (the kernel's dtype and shape) keeping each output's ``n`` largest |w|.

    The last axis indexes outputs; all other axes are an output's incoming connections (for a
    conv kernel ``(kh, kw, cin, cout)``, all ``kh * kw * cin``). Exactly ``min(n, fan_in)``
    entries per output are kept; ties go to the earlier entry.
    """
    w = jnp.asarray(kernel)
    if w.ndim < 2:
        raise ValueError(f"a kernel has at least 2 axes, got shape {w.shape}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    flat = jnp.abs(w).reshape(-1, w.shape[-1])
    order = jnp.argsort(-flat, axis=0, stable=True)
    rank = jnp.argsort(order, axis=0, stable=True)
    return (rank < n).astype(w.dtype).reshape(w.shape)


def with_masks(reparam: Reparam, masks: Mapping[str, jax.Array]) -> Reparam:
    """Return ``reparam`` with ``masks`` added (replacing any earlier mask of the same path)."""
    return Reparam({**reparam.masks, **masks}, reparam.indices, reparam.sizes)
