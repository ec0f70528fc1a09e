"""Data parallelism over the local devices with :mod:`jax.sharding`.

A one-axis :class:`~jax.sharding.Mesh` named ``"data"`` spans the devices; batches are split along
their first axis over it while parameters and optimiser state are replicated on every device.
XLA's SPMD partitioner then inserts the gradient all-reduce, so one jitted step serves 1 or many
devices alike (see the JAX guide "Distributed arrays and automatic parallelization").

Batch sizes must divide by the device count: :func:`round_batch` rounds them *up* to the next
multiple, and callers fill the extra rows (training repeats samples of the epoch, evaluation pads
and ignores the padding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "data"
"""Name of the mesh axis the batch is split over."""

T = TypeVar("T")
Device: TypeAlias = Any
"""A JAX device (`jax.Device`; jaxlib 0.10 ships no type stubs for it, so type checkers see a variable)."""


def data_mesh(devices: Sequence[Device] | None = None) -> Mesh:
    """Return a 1-D mesh named ``"data"`` over ``devices`` (default: every local device)."""
    devs = list(jax.local_devices() if devices is None else devices)
    if not devs:
        raise ValueError("data_mesh needs at least one device")
    return Mesh(np.array(devs), (AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    """Return the sharding that keeps a full copy of an array on every device of ``mesh``."""
    return NamedSharding(mesh, PartitionSpec())  # type: ignore[no-untyped-call]


def batch_sharded(mesh: Mesh) -> NamedSharding:
    """Return the sharding that splits an array's first (batch) axis over ``mesh``'s devices."""
    return NamedSharding(mesh, PartitionSpec(AXIS))  # type: ignore[no-untyped-call]


def round_batch(batch_size: int, mesh: Mesh) -> int:
    """Return ``batch_size`` rounded up to a positive multiple of ``mesh``'s device count."""
    if batch_size < 1:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    n = mesh.size
    return -(-batch_size // n) * n


def replicate(tree: T, mesh: Mesh) -> T:
    """Place a copy of every array of ``tree`` on all devices of ``mesh``.

    The result never aliases the input's buffers, so it may be donated to a jitted step without
    invalidating the caller's arrays.
    """
    # An explicit copy first: ``device_put(..., may_alias=False)`` may still alias on CPU.
    fresh = jax.tree.map(lambda a: jnp.array(a, copy=True), tree)
    out: T = jax.device_put(fresh, replicated(mesh))
    return out


def shard_batch(tree: Any, mesh: Mesh) -> Any:
    """Split every array of ``tree`` along its first axis over ``mesh`` (asynchronous transfer).

    The first axis must divide by the device count (see :func:`round_batch`).
    """
    for leaf in jax.tree.leaves(tree):
        if np.shape(leaf)[0] % mesh.size:
            raise ValueError(
                f"batch of {np.shape(leaf)[0]} rows does not divide over {mesh.size} devices"
            )
    return jax.device_put(tree, batch_sharded(mesh))
