"""The representative network of each family the search space can emit, as the search builds it, and its data.

A family is an image block type (``plain``, ``residual``, ``inverted``, ``dense``), the hand-written CNN seed, a
text encoder (``ngrams``, ``bag``, ``cnn``, ``transformer``) or the wide text variant (an encoder with the n-gram
bag beside it). Each row is a genome of ``synthesis.space`` (a seed where the search has one) turned into a core
spec by the search's own ``to_spec``, for a CIFAR-like image task or an SMS Spam-like text task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.spec import Spec
from synthesis.space import image, text
from synthesis.space.hparams import seed_hparams
from synthesis.space.types import SpaceInfo

IMAGE = SpaceInfo("image", (32, 32, 3), 10, scale=1 / 255)
"""A CIFAR-10-like task: 32x32 colour images, raw 0-255 pixels scaled inside the network, 10 classes."""
TEXT = SpaceInfo("text", (64 + 384,), 2, vocab_size=10_000, bag_start=64, bag_vocab=2**15 + 2**16 + 1,
                 bag_words=2**15 + 1)
"""An SMS Spam-like layout: 64 word ids (10,000 of them, subword buckets included), then a bag of 384 n-gram ids
in two blocks of 2^15 word and 2^16 character features; 2 classes."""
BAG_FILL = 0.5
"""Share of the bag's positions that hold a feature id (the rest is padding, 0)."""
SEARCH_BATCH = seed_hparams(IMAGE).batch_size
"""The batch size the search's seeds train with."""


@dataclass(frozen=True)
class Family:
    """One benchmark row: its name, the search-space genome and task of its representative network, and what
    it stands for (image block types or text encoder kinds, see :func:`kinds`)."""

    name: str
    arch: dict[str, Any]
    info: SpaceInfo
    note: str

    def spec(self) -> Spec:
        """The core spec the search ships for this genome."""
        to_spec = image.to_spec if self.info.modality == "image" else text.to_spec
        return to_spec(self.arch, self.info, f"bench-{self.name}")

    def covers(self) -> set[str]:
        """The kinds this row measures."""
        return kinds(self.arch)


def kinds(arch: dict[str, Any]) -> set[str]:
    """The families a genome belongs to: ``image:<block>`` per stage block type, ``text:<encoder>``, and
    ``text:wide`` for a wide text genome; ``image:hand-cnn`` for that seed."""
    if arch["kind"] == "image":
        found = {f"image:{s['block']}" for s in arch["stages"]}
        return found | ({"image:hand-cnn"} if arch == image.SEEDS["hand-cnn"] else set())
    found = {f"text:{arch['encoder']}"}
    return found | ({"text:wide"} if arch.get("wide") else set())


FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("hand-cnn", image.SEEDS["hand-cnn"], IMAGE, "seed: conv3x3-BN-ReLU 32,32, pool, 64,64, pool, 128, GAP"),
    Family("plain", image.arch([image.stage("plain", 1, 32), image.stage("plain", 2, 64),
                                image.stage("plain", 2, 128)], downsample="conv"), IMAGE,
           "plain stages, 'same' padding, BN, stride-2 convolutions between stages"),
    Family("residual", image.SEEDS["resnet"], IMAGE, "seed 'resnet': 3 stages of 2 residual blocks"),
    Family("inverted", image.SEEDS["mobilenet"], IMAGE, "seed 'mobilenet': inverted residuals, depthwise 3x3"),
    Family("dense", image.arch([image.stage("plain", 1, 32), image.stage("dense", 3, 64, extra=16),
                                image.stage("dense", 3, 128, extra=24)]), IMAGE,
           "DenseNet stages (growth 16 / 24) with 1x1 transitions"),
    Family("text-ngrams", text.SEEDS["hashed-ngrams"], TEXT, "seed 'hashed-ngrams': n-gram bag, hidden 64"),
    Family("text-bag", text.SEEDS["default-text-cnn"], TEXT, "seed 'default-text-cnn': trigram conv 128, max"),
    Family("text-cnn", text.SEEDS["kim-cnn"], TEXT, "seed 'kim-cnn': convs of widths 3,4,5 x 100, max"),
    Family("text-transformer", text.SEEDS["transformer"], TEXT, "seed 'transformer': 1 block, 4 heads, ff 2x"),
    Family("text-wide", text.SEEDS["wide-text-cnn"], TEXT, "seed 'wide-text-cnn': trigram CNN + n-gram bag"),
]}
"""One representative network per family, in the order of the table."""


def uncovered(archs: Iterable[dict[str, Any]]) -> set[str]:
    """The families of ``archs`` that no row of :data:`FAMILIES` measures."""
    covered = set().union(*(f.covers() for f in FAMILIES.values()))
    return set().union(*(kinds(a) for a in archs)) - covered


def batches(info: SpaceInfo, batch: int, count: int = 8, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` random batches of inputs (float32 0-255 pixels, or int32 word ids then sorted bag ids) and
    int32 labels for ``info``'s task."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        labels = rng.integers(0, info.num_classes, batch).astype(np.int32)
        if info.modality == "image":
            out.append((rng.integers(0, 256, (batch, *info.input_shape)).astype(np.float32), labels))
            continue
        words = rng.integers(1, info.vocab_size, (batch, info.sequence_length))
        bag_length = info.input_shape[0] - info.sequence_length
        bag = np.zeros((batch, bag_length), np.int64)
        filled = int(BAG_FILL * bag_length)
        bag[:, :filled] = np.sort(rng.integers(1, info.bag_vocab, (batch, filled)), axis=1)
        out.append((np.concatenate([words, bag], axis=1).astype(np.int32), labels))
    return out
