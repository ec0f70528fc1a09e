"""Integrated gradients: the input's difference from a baseline times the mean gradient along the straight path.

Sundararajan, Taly and Yan, "Axiomatic Attribution for Deep Networks", ICML 2017. Images: the baseline is the
black image (every raw pixel 0), and a pixel's attribution is the sum over its channels. Texts: the path scales
the embedding vectors of every position that holds an id from 0 (the baseline: those embeddings zero) to 1, so a
position's attribution is the integral of the gradient with respect to its scale (Sundararajan et al.'s embedding
baseline), shared among the words that produced its id. Padding keeps its embedding along the whole path: it is in
the baseline as in the input, so it gets no attribution and the words' scores alone sum to the logit difference.
The integral is the midpoint rule over `steps` points; the steps double (up to
MAX_STEPS) until completeness holds to COMPLETENESS (the attributions sum to the logit difference between input
and baseline, within 5 % of it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from synthesis.explain.base import register
from synthesis.explain.grads import input_gradients, scale_gradients
from synthesis.explain.subject import Subject, word_scores

STEPS, MAX_STEPS = 64, 512
"""The path's first number of points, and the most it doubles to."""
COMPLETENESS = 0.05
"""The largest completeness error allowed, a fraction of the logit difference between input and baseline."""
BASELINE, TEXT_BASELINE = "black image (raw pixels 0)", "zero embeddings (padding kept)"


def completeness_error(attributions: np.ndarray, difference: np.ndarray) -> np.ndarray:
    """Per input, |sum of attributions - logit difference| / |logit difference| (0 where the difference is 0)."""
    gap = np.abs(attributions.reshape(len(difference), -1).sum(axis=1) - difference)
    return np.where(np.abs(difference) > 1e-6, gap / np.maximum(np.abs(difference), 1e-6), 0.0)


Gradient = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""A point's gradients and target logits, for inputs at a fraction ``[N]`` of the way from the baseline."""


def path_integral(gradient: Gradient, delta: np.ndarray, n: int, steps: int = STEPS) -> tuple[np.ndarray, np.ndarray,
                                                                                               int]:
    """Attributions ``delta * mean gradient`` (per element), the completeness error per input and the steps used.

    The midpoint rule: it never evaluates the baseline itself, where a ReLU network's gradient can be far from its
    mean along the path (with the trapezoid rule, one MNIST-like image kept a 13 % error at 256 steps)."""
    return _integrated(gradient, delta, n, steps)[:3]


def _integrated(gradient: Gradient, delta: np.ndarray, n: int, steps: int = STEPS
                ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """:func:`path_integral`'s figures and the logit differences between input and baseline."""
    difference = gradient(np.ones(n, np.float32))[1] - gradient(np.zeros(n, np.float32))[1]
    while True:
        total = np.zeros_like(delta, dtype=np.float64)
        for alpha in (np.arange(steps) + 0.5) / steps:
            total += gradient(np.full(n, alpha, np.float32))[0]
        attributions = delta * total / steps
        error = completeness_error(attributions, difference)
        if error.max(initial=0.0) <= COMPLETENESS or steps >= MAX_STEPS:
            return attributions.astype(np.float32), error, steps, difference
        steps *= 2


def image_attributions(subject: Subject, x: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-pixel integrated gradients ``[N, H, W]`` from the black image, completeness errors and steps."""
    x = np.asarray(x, np.float32)
    t = jnp.asarray(targets, jnp.int32)

    def gradient(alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        grads, picked = input_gradients(subject.model, subject.variables,
                                        jnp.asarray(x * alpha[:, None, None, None]), t)
        return np.asarray(grads), np.asarray(picked)

    attributions, error, steps = path_integral(gradient, x, len(x))
    return attributions.sum(axis=-1), error, steps


def position_attributions(subject: Subject, rows: np.ndarray, targets: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-position integrated gradients ``[N, L]`` of int32 rows from zero embeddings of the positions holding an
    id (padding, id 0, kept: its attribution is 0), completeness errors and steps."""
    return _positions(subject, rows, targets)[:3]


def _positions(subject: Subject, rows: np.ndarray, targets: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    ids, t = jnp.asarray(rows), jnp.asarray(targets, jnp.int32)
    held = np.asarray(rows) != 0

    def gradient(alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scale = jnp.asarray(np.where(held, alpha[:, None], 1.0).astype(np.float32))
        grads, picked = scale_gradients(subject.model, subject.variables, ids, scale, t)
        return np.asarray(grads), np.asarray(picked)

    return _integrated(gradient, held.astype(np.float32), len(rows))


def text_attributions(subject: Subject, texts: Sequence[str], targets: np.ndarray
                      ) -> tuple[list[np.ndarray], np.ndarray, int]:
    """Per-word integrated gradients of `texts`, the completeness errors of the words' sums (a position that holds
    an id no word produced would leave its share out) and the steps."""
    assert subject.codec is not None
    rows = subject.rows(texts)
    attributions, _, steps, difference = _positions(subject, rows, targets)
    words = [word_scores(subject.codec.word_positions(text), attributions[i], len(text.split()))
             for i, text in enumerate(texts)]
    return words, completeness_error(np.asarray([w.sum() for w in words]), difference), steps


class IntegratedGradients:
    """Integrated gradients, for image and text models."""

    name = "integrated-gradients"
    modalities = frozenset({"image", "text"})

    def images(self, subject: Subject, x: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Per-pixel attributions from the black image."""
        return image_attributions(subject, x, targets)[0]

    def texts(self, subject: Subject, texts: Sequence[str], targets: np.ndarray) -> list[np.ndarray]:
        """Per-word attributions from zero embeddings (padding kept)."""
        return text_attributions(subject, texts, targets)[0]


register(IntegratedGradients())
