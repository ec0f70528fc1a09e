"""Checks that an attribution can fail: deletion faithfulness and the weight-randomisation sanity test.

- Deletion (Petsiuk et al., "RISE", BMVC 2018): remove the input's parts (pixels set to black, or words left out)
  in attribution order, most important first, and average the target class's probability over the steps; a
  faithful map lowers it faster than a random order does (a smaller area under the curve).
- Cascading randomisation (Adebayo et al., "Sanity Checks for Saliency Maps", NeurIPS 2018): re-initialise the
  weights from the output layers down; a map that does not change (Spearman rank correlation with the original
  stays high) does not explain the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from scipy.stats import spearmanr

from synthesis.explain.subject import Subject, output_layers

DELETION_STEPS = 20


def image_deletion(subject: Subject, x: np.ndarray, targets: np.ndarray, maps: np.ndarray,
                   order: str = "attribution", seed: int = 0) -> np.ndarray:
    """Per image, the area under the deletion curve: the mean target probability as pixels are blacked out
    (all channels) in `order` ('attribution': highest first; 'random')."""
    n, height, width = maps.shape
    rng = np.random.default_rng(seed)
    ranks = [np.argsort(-m.ravel(), kind="stable") if order == "attribution" else rng.permutation(height * width)
             for m in maps]
    rows, curve = np.arange(n), []
    for step in range(DELETION_STEPS + 1):
        cut = round(step * height * width / DELETION_STEPS)
        deleted = np.array(x, np.float32, copy=True).reshape(n, height * width, -1)
        for i in range(n):
            deleted[i, ranks[i][:cut]] = 0.0
        curve.append(subject.probabilities(deleted.reshape(x.shape))[rows, targets])
    return np.asarray(np.trapezoid(np.stack(curve, axis=1), dx=1.0 / DELETION_STEPS, axis=1))


def text_deletion(subject: Subject, texts: Sequence[str], targets: np.ndarray, scores: Sequence[np.ndarray],
                  order: str = "attribution", seed: int = 0) -> np.ndarray:
    """Per text, the area under the deletion curve as words are left out in `order`."""
    rng = np.random.default_rng(seed)
    variants: list[str] = []
    for text, s in zip(texts, scores, strict=True):
        words = text.split()
        rank = np.argsort(-np.asarray(s), kind="stable") if order == "attribution" else rng.permutation(len(words))
        for step in range(DELETION_STEPS + 1):
            gone = set(rank[:round(step * len(words) / DELETION_STEPS)].tolist())
            variants.append(" ".join(w for j, w in enumerate(words) if j not in gone))
    proba = subject.probabilities(subject.rows(variants)).reshape(len(texts), DELETION_STEPS + 1, -1)
    curve = proba[np.arange(len(texts)), :, targets]
    return np.asarray(np.trapezoid(curve, dx=1.0 / DELETION_STEPS, axis=1))


def randomised(subject: Subject, layers: Sequence[str], seed: int = 0) -> Subject:
    """The subject with the parameters of `layers` re-initialised (a fresh draw of the network's initialisers)."""
    fresh = subject.model.init(jax.random.key(seed))["params"]
    params: dict[str, Any] = dict(subject.variables["params"])
    for layer in layers:
        if layer in params:
            params[layer] = fresh[layer]
    return subject.with_variables({**subject.variables, "params": params})


def top_block_randomised(subject: Subject, seed: int = 0) -> Subject:
    """The first step of the cascade: the output layers re-initialised."""
    return randomised(subject, output_layers(subject.graph), seed)


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two maps (0 when either is constant)."""
    rho = spearmanr(np.ravel(a), np.ravel(b)).statistic
    return 0.0 if not np.isfinite(rho) else float(rho)
