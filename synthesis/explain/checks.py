"""Checks that an attribution can fail: deletion and insertion faithfulness, and the weight-randomisation sanity test.

- Deletion and insertion (Petsiuk et al., "RISE", BMVC 2018): remove the input's parts (pixels set to black, or words
  left out) in attribution order, most important first, and average the target class's probability over the steps;
  a faithful map lowers it faster than a random order does (a smaller area under the curve). Insertion starts from
  the empty input (black, or no words) and puts the parts back in the same order: a faithful map raises the
  probability faster than random (a larger area). A method passes on a model when it beats random order on both.
- Cascading randomisation (Adebayo et al., "Sanity Checks for Saliency Maps", NeurIPS 2018): re-initialise the
  weights from the output layers down; a map that does not change (Spearman rank correlation with the original
  stays high) does not explain the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from scipy.stats import spearmanr

from synthesis.explain.subject import Subject, output_layers

DELETION_STEPS = 20


def _kept(ranks: Sequence[np.ndarray], size: int, step: int, mode: str) -> list[np.ndarray]:
    """Per input, the positions present at `step` of a deletion (all but the first ranked) or an insertion (the first
    ranked only)."""
    cut = round(step * size / DELETION_STEPS)
    return [rank[cut:] if mode == "deletion" else rank[:cut] for rank in ranks]


def _ranks(scores: Sequence[np.ndarray], order: str, seed: int) -> list[np.ndarray]:
    """Per input, its positions most important first ('attribution') or shuffled ('random')."""
    rng = np.random.default_rng(seed)
    return [np.argsort(-np.ravel(s), kind="stable") if order == "attribution" else rng.permutation(np.size(s))
            for s in scores]


def image_curve(subject: Subject, x: np.ndarray, targets: np.ndarray, maps: np.ndarray, mode: str = "deletion",
                order: str = "attribution", seed: int = 0) -> np.ndarray:
    """Per image, the area under the deletion (or insertion) curve: the mean target probability as pixels are
    blacked out (or put back on black, all channels) in `order` ('attribution': highest first; 'random')."""
    n, height, width = maps.shape
    ranks, rows, curve = _ranks(list(maps), order, seed), np.arange(n), []
    flat = np.asarray(x, np.float32).reshape(n, height * width, -1)
    for step in range(DELETION_STEPS + 1):
        shown = np.zeros_like(flat)
        for i, kept in enumerate(_kept(ranks, height * width, step, mode)):
            shown[i, kept] = flat[i, kept]
        curve.append(subject.probabilities(shown.reshape(x.shape))[rows, targets])
    return np.asarray(np.trapezoid(np.stack(curve, axis=1), dx=1.0 / DELETION_STEPS, axis=1))


def text_curve(subject: Subject, texts: Sequence[str], targets: np.ndarray, scores: Sequence[np.ndarray],
               mode: str = "deletion", order: str = "attribution", seed: int = 0) -> np.ndarray:
    """Per text, the area under the deletion (or insertion) curve as words are left out (or put back into the empty
    text, in their own places) in `order`."""
    ranks, variants = _ranks(scores, order, seed), []
    for text, rank in zip(texts, ranks, strict=True):
        words = text.split()
        for step in range(DELETION_STEPS + 1):
            kept = set(_kept([rank], len(words), step, mode)[0].tolist())
            variants.append(" ".join(w for j, w in enumerate(words) if j in kept))
    proba = subject.probabilities(subject.rows(variants)).reshape(len(texts), DELETION_STEPS + 1, -1)
    curve = proba[np.arange(len(texts)), :, targets]
    return np.asarray(np.trapezoid(curve, dx=1.0 / DELETION_STEPS, axis=1))


def faithfulness(curve: Callable[[str, str], np.ndarray]) -> dict[str, Any]:
    """A method's deletion and insertion areas (mean over its inputs) against random order's, and whether it beats
    random on both; `curve(mode, order)` gives the per-input areas."""
    out = {f"{prefix}{mode}_auc": float(curve(mode, order).mean())
           for mode in ("deletion", "insertion") for order, prefix in (("attribution", ""), ("random", "random_"))}
    out["better_than_random"] = bool(out["deletion_auc"] < out["random_deletion_auc"]
                                     and out["insertion_auc"] > out["random_insertion_auc"])
    return out


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
