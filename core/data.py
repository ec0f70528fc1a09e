"""Input pipeline: a dataset container, epoch batching, augmentation and prefetch to device.

Batching is index-based: each epoch draws a permutation of the training set from
``(seed, epoch)``, and every batch is gathered from host memory with one NumPy ``take``. The last
partial batch of an epoch is **padded by wrapping around** the epoch's permutation, so every batch
has the same shape (one compilation) and every sample is seen at least once per epoch.
Evaluation batches are instead padded with zero rows that carry ``valid = 0``.

Augmentation (:func:`augment`) is a pure array function meant to run inside the jitted train step.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from core.parallel import shard_batch


@dataclass(frozen=True)
class Dataset:
    """Training and validation arrays; ``x`` rows are samples, ``y`` integer class ids."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray

    def __post_init__(self) -> None:
        for name in ("train", "val"):
            x, y = getattr(self, f"x_{name}"), getattr(self, f"y_{name}")
            if len(x) != len(y):
                raise ValueError(f"x_{name} has {len(x)} rows but y_{name} has {len(y)}")
            if len(x) == 0:
                raise ValueError(f"the {name} set is empty")
            if np.ndim(y) != 1 or not np.issubdtype(np.asarray(y).dtype, np.integer):
                raise ValueError(f"y_{name} must be a 1-D integer array")


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Return the number of batches of ``batch_size`` that cover ``n`` samples (last one padded)."""
    return -(-n // batch_size)


def epoch_indices(n: int, batch_size: int, seed: int, epoch: int) -> np.ndarray:
    """Return the epoch's sample indices as ``[steps, batch_size]``.

    A permutation of ``range(n)`` drawn from ``(seed, epoch)``, repeated from its start to fill the
    last batch (so small datasets yield full batches too).
    """
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    steps = steps_per_epoch(n, batch_size)
    return np.resize(perm, steps * batch_size).reshape(steps, batch_size)


def train_batches(
    x: np.ndarray, y: np.ndarray, batch_size: int, seed: int, epoch: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield the epoch's ``(x, y)`` training batches in host memory."""
    for idx in epoch_indices(len(x), batch_size, seed, epoch):
        yield np.take(x, idx, axis=0), np.take(y, idx, axis=0)


def eval_batches(
    x: np.ndarray, y: np.ndarray | None, batch_size: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(x, y, valid)`` batches in order; the last is zero-padded with ``valid = 0`` rows.

    ``y`` may be ``None`` (prediction only); zeros stand in for it.
    """
    n = len(x)
    labels = np.zeros(n, np.int32) if y is None else np.asarray(y, np.int32)
    for start in range(0, n, batch_size):
        xb, yb = x[start : start + batch_size], labels[start : start + batch_size]
        valid = np.ones(len(xb), np.float32)
        pad = batch_size - len(xb)
        if pad:
            xb = np.concatenate([xb, np.zeros((pad, *xb.shape[1:]), xb.dtype)])
            yb = np.concatenate([yb, np.zeros(pad, yb.dtype)])
            valid = np.concatenate([valid, np.zeros(pad, np.float32)])
        yield xb, yb, valid


def prefetch_to_device(
    batches: Iterable[tuple[np.ndarray, ...]], mesh: Mesh, size: int = 2
) -> Iterator[tuple[jax.Array, ...]]:
    """Yield ``batches`` sharded over ``mesh``, keeping ``size`` transfers in flight ahead.

    ``jax.device_put`` is asynchronous, so copying the next batches overlaps the running step
    (the idea of ``flax.jax_utils.prefetch_to_device``).
    """
    it = iter(batches)
    queue: collections.deque[tuple[jax.Array, ...]] = collections.deque()

    def enqueue(k: int) -> None:
        for batch in itertools.islice(it, k):
            queue.append(shard_batch(batch, mesh))

    enqueue(size)
    while queue:
        yield queue.popleft()
        enqueue(1)


def random_shift(x: jax.Array, key: jax.Array, max_shift: int) -> jax.Array:
    """Translate each image of ``x`` ``[N, H, W, C]`` by up to ``max_shift`` pixels on each axis.

    Edge pixels fill the uncovered border (pad with edge values, then crop at a random offset).
    """
    if max_shift <= 0:
        return x
    n, h, w, c = x.shape
    s = max_shift
    padded = jnp.pad(x, ((0, 0), (s, s), (s, s), (0, 0)), mode="edge")
    offsets = jax.random.randint(key, (n, 2), 0, 2 * s + 1)

    def crop(img: jax.Array, off: jax.Array) -> jax.Array:
        return jax.lax.dynamic_slice(img, (off[0], off[1], 0), (h, w, c))

    out: jax.Array = jax.vmap(crop)(padded, offsets)
    return out


def random_flip(x: jax.Array, key: jax.Array) -> jax.Array:
    """Mirror each image of ``x`` ``[N, H, W, C]`` left-right with probability 1/2."""
    flip = jax.random.bernoulli(key, 0.5, (x.shape[0],))
    return jnp.where(flip[:, None, None, None], x[:, :, ::-1, :], x)


def augment(x: jax.Array, key: jax.Array, *, max_shift: int = 0, flip: bool = False) -> jax.Array:
    """Return a randomly augmented image batch: shifts of up to ``max_shift`` px, optional flips.

    Only images (rank 4, ``[N, H, W, C]``) are augmented; other inputs come back unchanged.
    """
    if x.ndim != 4:
        return x
    k_shift, k_flip = jax.random.split(key)
    x = random_shift(x, k_shift, max_shift)
    return random_flip(x, k_flip) if flip else x
