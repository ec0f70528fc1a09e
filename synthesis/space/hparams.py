"""Training hyper-parameters as genes: their ranges, random draws, known-good values and mutations."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from synthesis.space.genes import log_uniform, pick, pick_other, significant
from synthesis.space.types import BATCH_SIZES, HParams, SpaceInfo

LEARNING_RATE = (3e-4, 1e-2)
"""Log-uniform range of AdamW's peak learning rate."""
SGD_LEARNING_RATE = (1e-2, 0.3)
"""Log-uniform range of Nesterov SGD's peak learning rate (the hand-written CNN trains at 0.2 with batch 128)."""
SGD_PER_ADAMW = 100.0
"""How many times AdamW's rate a switch to SGD starts from (1e-3 -> 0.1), and the reverse."""
WEIGHT_DECAY = (1e-5, 1e-2)
"""Log-uniform range of the weight decay (AdamW's decoupled, SGD's L2 term)."""
LABEL_SMOOTHING = (0.0, 0.15)


HAND_CNN_RECIPE = {"optimizer": "sgd", "learning_rate": 0.2, "weight_decay": 5e-4, "batch_size": 128}
"""The hand-written CNN's own recipe (Nesterov SGD at a high rate, with its warm-up: `SGD_WARMUP`), which its image
seed trains with; chosen over the AdamW default on the validation rows of cifar10_small's training part at equal
seconds (`bench/image_recipe.py`, `bench/README.md`)."""


def seed_hparams(info: SpaceInfo, design: str = "") -> HParams:
    """Return the hyper-parameters core trains the default network `design` with, fitted to the task: AdamW, or for
    the hand-written CNN on images `HAND_CNN_RECIPE` (the other image seeds, LeNet without batch norm among them,
    keep AdamW, which tolerates their lack of normalisation)."""
    shift = min(info.max_shift, round(min(info.input_shape[:2]) / 14)) if info.modality == "image" else 0
    hparams = HParams(learning_rate=1e-3, weight_decay=1e-4, max_shift=shift, label_smoothing=0.1, batch_size=64)
    if info.modality == "image" and design == "hand-cnn":
        return replace(hparams, **HAND_CNN_RECIPE)  # type: ignore[arg-type]
    return hparams


def optimizers(info: SpaceInfo) -> tuple[str, ...]:
    """The optimizers searched for ``info``'s task: AdamW and Nesterov SGD for images (SGD often generalises
    better on small CNNs: Wilson et al., "The Marginal Value of Adaptive Gradient Methods", NeurIPS 2017); AdamW
    alone for text, whose large, sparsely updated embedding tables suit a per-weight step size."""
    return ("adamw", "sgd") if info.modality == "image" else ("adamw",)


def sample_hparams(rng: np.random.Generator, info: SpaceInfo) -> HParams:
    """Return hyper-parameters drawn at random from the searched ranges."""
    choices = optimizers(info)
    optimizer = pick(rng, choices) if len(choices) > 1 else choices[0]  # text: no draw, its searches as before
    return HParams(learning_rate=log_uniform(rng, *_rates(optimizer)), weight_decay=log_uniform(rng, *WEIGHT_DECAY),
                   max_shift=int(rng.integers(info.max_shift + 1)),
                   label_smoothing=round(float(rng.uniform(*LABEL_SMOOTHING)), 3),
                   batch_size=pick(rng, BATCH_SIZES), optimizer=optimizer)


def mutate_hparams(rng: np.random.Generator, hp: HParams, info: SpaceInfo) -> HParams:
    """Return ``hp`` with one hyper-parameter changed (rates move by a log-normal factor within range)."""
    genes = ["learning_rate", "weight_decay", "label_smoothing", "batch_size"]
    if info.max_shift > 0:
        genes.append("max_shift")
    if len(optimizers(info)) > 1:
        genes.append("optimizer")
    gene = pick(rng, genes)
    if gene == "optimizer":
        other = pick_other(rng, optimizers(info), hp.optimizer)
        return replace(hp, optimizer=other, learning_rate=_within(carried_rate(hp.learning_rate, hp.optimizer, other),
                                                                   _rates(other)))
    if gene == "learning_rate":
        return replace(hp, learning_rate=_scaled(rng, hp.learning_rate, _rates(hp.optimizer)))
    if gene == "weight_decay":
        return replace(hp, weight_decay=_scaled(rng, hp.weight_decay, WEIGHT_DECAY))
    if gene == "label_smoothing":
        return replace(hp, label_smoothing=round(float(rng.uniform(*LABEL_SMOOTHING)), 3))
    if gene == "batch_size":
        return replace(hp, batch_size=pick_other(rng, BATCH_SIZES, hp.batch_size))
    return replace(hp, max_shift=pick_other(rng, range(info.max_shift + 1), hp.max_shift))


def carried_rate(rate: float, source: str, target: str) -> float:
    """The learning rate of optimizer ``target`` that trains about as fast as ``rate`` does with ``source`` (an
    SGD rate is :data:`SGD_PER_ADAMW` times AdamW's)."""
    per_adamw = {"adamw": 1.0, "sgd": SGD_PER_ADAMW}
    return rate * per_adamw[target] / per_adamw[source]


def _rates(optimizer: str) -> tuple[float, float]:
    return SGD_LEARNING_RATE if optimizer == "sgd" else LEARNING_RATE


def _within(value: float, bounds: tuple[float, float]) -> float:
    return significant(min(max(value, bounds[0]), bounds[1]))


def _scaled(rng: np.random.Generator, value: float, bounds: tuple[float, float]) -> float:
    return _within(value * float(np.exp(rng.normal(0.0, 0.7))), bounds)

