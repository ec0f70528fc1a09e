"""Per-channel input normalisation learned from the training images.

Each channel c of an image is standardised inside the network as ``x * scale[c] + offset[c]`` with
``scale = 1 / std`` and ``offset = -mean / std`` over the training split's pixels of that channel
(the usual per-channel standardisation, as torchvision's ``Normalize`` with dataset statistics), so
a model takes raw pixels and an RGB dataset whose channels differ in brightness or contrast gets
each channel to zero mean and unit variance. A constant channel (std 0) keeps ``scale = 1``.
"""

from __future__ import annotations

import numpy as np

_BLOCK = 4096
"""Images summed at a time, so that a large uint8 dataset is never copied to floats whole."""


def channel_normalisation(images: np.ndarray, rows: np.ndarray | None = None
                          ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Return ``(scale, offset)``, one value per channel (the last axis) of ``images`` ``[N, ..., C]``:
    ``1 / std`` and ``-mean / std`` over the images ``rows`` (all when None); std 0 counts as 1."""
    channels = images.shape[-1]
    picked = np.arange(images.shape[0]) if rows is None else np.asarray(rows)
    if picked.size == 0:
        raise ValueError("per-channel statistics need at least one image")
    blocks = [picked[start : start + _BLOCK] for start in range(0, picked.size, _BLOCK)]
    count = picked.size * int(np.prod(images.shape[1:-1], dtype=np.int64))
    mean = sum((images[b].reshape(-1, channels).astype(np.float64).sum(axis=0) for b in blocks),
               np.zeros(channels)) / count
    squares = sum((np.square(images[b].reshape(-1, channels).astype(np.float64) - mean).sum(axis=0)
                   for b in blocks), np.zeros(channels))  # two passes: a constant channel gets exactly 0
    std = np.sqrt(squares / count)
    std = np.where(std > 0, std, 1.0)
    return tuple(float(v) for v in 1.0 / std), tuple(float(v) for v in -mean / std)
