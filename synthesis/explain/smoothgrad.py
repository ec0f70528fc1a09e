"""SmoothGrad: the gradient averaged over noisy copies of the input, times the input.

Smilkov et al., "SmoothGrad: removing noise by adding noise", 2017: SAMPLES copies with Gaussian noise of NOISE
times the input's range (they recommend 10-20 %), each image's own ``max - min``, so images of floats in [0, 1] and
of bytes get the same relative noise. Images: a pixel's score is the channel sum of the averaged
gradient times its raw value (the difference from the black image, as integrated gradients'); texts: the noise is
on the scale of each position's embedding vectors around 1, and a position's score is the averaged gradient with
respect to that scale. The noise is drawn from a fixed seed, so a map is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from synthesis.explain.base import register
from synthesis.explain.grads import input_gradients, scale_gradients, text_position_scores
from synthesis.explain.subject import Subject

SAMPLES = 32
NOISE = 0.15
"""The noise's standard deviation as a share of each input's range."""
SEED = 0


def image_scores(subject: Subject, x: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``[N, H, W]`` SmoothGrad x input of raw images."""
    x = np.asarray(x, np.float32)
    rng, t = np.random.default_rng(SEED), jnp.asarray(targets, jnp.int32)
    axes = tuple(range(1, x.ndim))
    sigma = NOISE * (x.max(axis=axes, keepdims=True) - x.min(axis=axes, keepdims=True))
    total = np.zeros_like(x, dtype=np.float64)
    for _ in range(SAMPLES):
        noisy = x + (rng.normal(0.0, 1.0, x.shape) * sigma).astype(np.float32)
        total += np.asarray(input_gradients(subject.model, subject.variables, jnp.asarray(noisy), t)[0])
    return np.asarray((x * total / SAMPLES).sum(axis=-1), np.float32)


def position_scores(subject: Subject, rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``[N, L]`` SmoothGrad of int32 rows over noisy embedding scales."""
    rng, ids, t = np.random.default_rng(SEED), jnp.asarray(rows), jnp.asarray(targets, jnp.int32)
    total = np.zeros(rows.shape, np.float64)
    for _ in range(SAMPLES):
        scale = 1.0 + rng.normal(0.0, NOISE, rows.shape).astype(np.float32)
        total += np.asarray(scale_gradients(subject.model, subject.variables, ids, jnp.asarray(scale), t)[0])
    return (total / SAMPLES).astype(np.float32)


class SmoothGrad:
    """SmoothGrad, for image and text models."""

    name = "smoothgrad"
    modalities = frozenset({"image", "text"})

    def images(self, subject: Subject, x: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Per-pixel SmoothGrad x input."""
        return image_scores(subject, x, targets)

    def texts(self, subject: Subject, texts: Sequence[str], targets: np.ndarray) -> list[np.ndarray]:
        """Per-word SmoothGrad over the embeddings' scale."""
        return text_position_scores(subject, texts, targets, lambda rows, t: position_scores(subject, rows, t))


register(SmoothGrad())
