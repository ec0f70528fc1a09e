"""Training hyper-parameters as genes: their ranges, random draws, known-good values and mutations."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from synthesis.space.genes import log_uniform, pick, pick_other, significant
from synthesis.space.types import BATCH_SIZES, HParams, SpaceInfo

LEARNING_RATE = (3e-4, 1e-2)
"""Log-uniform range of AdamW's peak learning rate."""
WEIGHT_DECAY = (1e-5, 1e-2)
"""Log-uniform range of AdamW's decoupled weight decay."""
LABEL_SMOOTHING = (0.0, 0.15)


def seed_hparams(info: SpaceInfo) -> HParams:
    """Return the hyper-parameters core trains its default networks with, fitted to the task."""
    shift = min(info.max_shift, round(min(info.input_shape[:2]) / 14)) if info.modality == "image" else 0
    return HParams(learning_rate=1e-3, weight_decay=1e-4, max_shift=shift, label_smoothing=0.1, batch_size=64)


def sample_hparams(rng: np.random.Generator, info: SpaceInfo) -> HParams:
    """Return hyper-parameters drawn at random from the searched ranges."""
    return HParams(learning_rate=log_uniform(rng, *LEARNING_RATE), weight_decay=log_uniform(rng, *WEIGHT_DECAY),
                   max_shift=int(rng.integers(info.max_shift + 1)),
                   label_smoothing=round(float(rng.uniform(*LABEL_SMOOTHING)), 3),
                   batch_size=pick(rng, BATCH_SIZES))


def mutate_hparams(rng: np.random.Generator, hp: HParams, info: SpaceInfo) -> HParams:
    """Return ``hp`` with one hyper-parameter changed (rates move by a log-normal factor within range)."""
    genes = ["learning_rate", "weight_decay", "label_smoothing", "batch_size"]
    if info.max_shift > 0:
        genes.append("max_shift")
    gene = pick(rng, genes)
    if gene == "learning_rate":
        return replace(hp, learning_rate=_scaled(rng, hp.learning_rate, LEARNING_RATE))
    if gene == "weight_decay":
        return replace(hp, weight_decay=_scaled(rng, hp.weight_decay, WEIGHT_DECAY))
    if gene == "label_smoothing":
        return replace(hp, label_smoothing=round(float(rng.uniform(*LABEL_SMOOTHING)), 3))
    if gene == "batch_size":
        return replace(hp, batch_size=pick_other(rng, BATCH_SIZES, hp.batch_size))
    return replace(hp, max_shift=pick_other(rng, range(info.max_shift + 1), hp.max_shift))


def _scaled(rng: np.random.Generator, value: float, bounds: tuple[float, float]) -> float:
    factor = float(np.exp(rng.normal(0.0, 0.7)))
    return significant(min(max(value * factor, bounds[0]), bounds[1]))

