"""Compression reparameterisation: binary masks and shared weights (codebook + index array).

A :class:`Reparam` says, per flat parameter path (see :mod:`core.tree`), which entries are pruned
(``masks``) and which leaves share weights (``indices`` into a codebook of ``sizes[path]`` values).
Training works on a *trainable* pytree in which each shared leaf is replaced by its codebook; the
model's dense parameters are obtained from it with :func:`materialise`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import jax


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
