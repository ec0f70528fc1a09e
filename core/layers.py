"""Small Flax linen modules for ops that have no single linen layer.

Parameter names match :data:`core.ops.OPS` (``params``) so that checkpoints, compression and
export can address every leaf by the same path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Dtype = Any


class SeparableConv2D(nn.Module):
    """Depthwise convolution (no bias) then a 1x1 pointwise convolution (Chollet, 2017).

    Parameters: ``{"depthwise": {"kernel"}, "pointwise": {"kernel", "bias"?}}``.
    """

    filters: int
    kernel_size: Sequence[int]
    strides: Sequence[int]
    padding: str
    depth_multiplier: int = 1
    use_bias: bool = True
    dtype: Dtype = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Apply the layer to ``[N, H, W, C]``."""
        channels = x.shape[-1]
        x = nn.Conv(channels * self.depth_multiplier, tuple(self.kernel_size), tuple(self.strides),
                    padding=self.padding, feature_group_count=channels, use_bias=False,
                    dtype=self.dtype, name="depthwise")(x)
        return nn.Conv(self.filters, (1, 1), use_bias=self.use_bias, dtype=self.dtype,
                       name="pointwise")(x)


class PositionEmbedding(nn.Module):
    """Adds a learned position embedding to ``[N, L, D]`` (as in BERT / ViT).

    Parameter: ``{"embedding": (L, D)}``.
    """

    dtype: Dtype = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """Return ``x`` plus the embedding of each position."""
        table = self.param("embedding", nn.initializers.normal(stddev=0.02), x.shape[1:],
                           jnp.float32)
        dtype = self.dtype or x.dtype
        return x.astype(dtype) + table.astype(dtype)[None]
