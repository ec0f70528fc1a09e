"""The learning-rate schedule with its lengths as values of the program, not constants compiled into it.

optax's ``warmup_cosine_decay_schedule`` takes its warm-up and decay lengths as Python numbers, which a jitted
train step compiles in: every schedule length (a run of 6 epochs, one of 7) is a program of its own. Here the
lengths are an int32 pair the step receives, so one compiled step serves every run of a network; the values are
bit for bit those optax computes as XLA compiles it (its divisions by constants become multiplications by
reciprocals, so these are written that way).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np


def schedule_steps(warmup_fraction: float, total_steps: int) -> np.ndarray:
    """The ``[warmup, total]`` steps (int32) of a run of ``total_steps`` steps that warms up for
    ``warmup_fraction`` of them (at least one step is left to decay)."""
    total = max(1, total_steps)
    return np.asarray([min(int(warmup_fraction * total), total - 1), total], np.int32)


def warmup_cosine(peak: float, steps: jax.Array) -> Callable[[jax.Array], jax.Array]:
    """Linear warm-up from 0 to ``peak`` over ``steps[0]`` steps, then cosine decay to 0 at ``steps[1]``: optax's
    ``warmup_cosine_decay_schedule(0.0, peak, warmup, total)`` with ``steps`` a traced ``[warmup, total]``."""
    warmup, total = steps[0], steps[1]
    decay = (total - warmup).astype(jnp.float32)

    def linear(count: jax.Array) -> jax.Array:
        count = jnp.clip(count, 0, warmup)
        frac = 1 - count * (1 / jnp.maximum(warmup, 1).astype(jnp.float32))
        return (0.0 - peak) * (frac**1) + peak

    def cosine(count: jax.Array) -> jax.Array:
        count = jnp.minimum(count, decay)
        cosine_decay = 0.5 * (1 + jnp.cos(count * (jnp.pi * (1 / decay))))
        decayed = (1 - 0.0) * cosine_decay**1.0 + 0.0
        return peak * decayed

    def schedule(count: jax.Array) -> jax.Array:
        return jnp.where(count < warmup, linear(count), cosine(count - warmup))

    return schedule
