"""Synthetic data whose right explanation is known: the checks of `synthesis.explain` (tests and bench/xai.py).

- Images: the class is decided only by a small object (a plus or a ring) at a random place on a cluttered
  background; the object's box is known.
- Texts: the class is decided only by one keyword among neutral words; the keyword's position is known.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.data import Dataset
from core.model import build
from core.spec import Spec
from core.train_config import TrainConfig
from core.training import train
from domain.ingest.text import Layout
from synthesis.space.blocks import Net

SIZE, OBJECT = 32, 5
_PLUS = np.zeros((OBJECT, OBJECT), bool)
_PLUS[OBJECT // 2, :] = _PLUS[:, OBJECT // 2] = True
_RING = np.ones((OBJECT, OBJECT), bool)
_RING[1:-1, 1:-1] = False
_CROSS = np.eye(OBJECT, dtype=bool) | np.eye(OBJECT, dtype=bool)[::-1]
_CORNER = np.zeros((OBJECT, OBJECT), bool)
_CORNER[:, 0] = _CORNER[-1, :] = True
SHAPES = (_PLUS, _RING, _CROSS, _CORNER)
"""The objects, one per class: with two classes a network may learn one detector and call its absence the other
class, which no attribution can point at; with four, each class needs evidence of its own."""

NEUTRAL = (
    "the", "a", "of", "to", "and", "in", "on", "at", "for", "with", "from", "by", "about", "table", "river",
    "window", "morning", "paper", "garden", "street", "music", "chair", "yellow", "seven", "cloud", "letter",
    "market", "bottle", "forest", "engine", "pocket", "ladder", "island", "basket", "mirror", "candle", "orange",
    "winter", "button", "pencil", "blanket", "harbor", "tunnel", "castle", "meadow", "lantern", "saddle", "violin",
    "compass", "wagon", "anchor", "velvet", "marble", "copper", "canvas", "timber", "cotton", "granite",
)
KEYWORDS = (("excellent", "wonderful", "superb"), ("terrible", "awful", "dreadful"))


def object_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``x`` [n, 32, 32, 1] raw pixels 0-255 (float32), labels [n] (the index of the object's shape in SHAPES),
    and each object's box
    ``(top, left, bottom, right)`` [n, 4] (bottom and right exclusive)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 60, (n, SIZE, SIZE)).astype(np.float32)
    y = np.arange(n) % len(SHAPES)
    rng.shuffle(y)
    boxes = np.zeros((n, 4), np.int64)
    for i in range(n):
        for _ in range(12):  # clutter: short bright dashes, horizontal or vertical, never the objects' shapes
            r, c = rng.integers(0, SIZE - 3, 2)
            length = int(rng.integers(2, 4))
            if rng.random() < 0.5:
                x[i, r, c:c + length] = rng.uniform(120, 255)
            else:
                x[i, r:r + length, c] = rng.uniform(120, 255)
        top, left = rng.integers(0, SIZE - OBJECT + 1, 2)
        patch = x[i, top:top + OBJECT, left:left + OBJECT]
        patch[:] = rng.uniform(0, 60, patch.shape)
        patch[SHAPES[y[i]]] = 255.0
        boxes[i] = (top, left, top + OBJECT, left + OBJECT)
    return x[..., None], y.astype(np.int32), boxes


def keyword_texts(n: int, seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Texts of 6 to 14 neutral words with one class keyword at a random place, labels [n] and each keyword's
    word index."""
    rng = np.random.default_rng(seed)
    texts, labels, where = [], np.arange(n) % 2, np.zeros(n, np.int64)
    rng.shuffle(labels)
    for i in range(n):
        words = list(rng.choice(NEUTRAL, size=int(rng.integers(6, 15))))
        at = int(rng.integers(0, len(words) + 1))
        words.insert(at, str(rng.choice(KEYWORDS[labels[i]])))
        texts.append(" ".join(words))
        where[i] = at
    return texts, labels.astype(np.int32), where


def object_cnn(classes: int = len(SHAPES), size: int = SIZE, channels: int = 1) -> Spec:
    """A small CNN (3x3 convolutions with batch norm, one max-pooling, global average pooling) for raw pixels."""
    net = Net()
    h = net.conv("input", "c1", 16, 3, norm=True)
    h = net.add("p1", "max_pool2d", h, pool_size=[2, 2])
    h = net.conv(h, "c2", 32, 3, norm=True)
    h = net.conv(h, "c3", 32, 3, norm=True)
    net.head(net.global_pools(h, "avg")[0], 0, 0.0, classes)
    return net.spec("cnn", {"shape": [size, size, channels], "dtype": "float32", "modality": "image",
                            "scale": 1 / 64, "offset": -1.0}, classes)


def bag_model(layout: Layout, length: int, classes: int) -> Spec:
    """A bag of hashed n-gram embeddings (the text space's 'hashed-ngrams' family, without its hidden layer) over
    rows of `length` ids."""
    net = Net()
    bag = net.add("bag", "embedding_bag", "input", vocab_size=layout["bag_vocab"], start=layout["bag_start"],
                  dim=32, norm="sqrt")
    net.head(bag, 0, 0.0, classes)
    return net.spec("bag", {"shape": [length], "dtype": "int32", "modality": "text"}, classes)


def word_model(layout: Layout, length: int, classes: int) -> Spec:
    """Word embeddings, a width-3 convolution and global average pooling over the word positions (the text
    space's word CNN): padding positions have an embedding and count in the mean."""
    net = Net()
    embed = net.add("embed", "embedding", "input", vocab_size=layout["vocab_size"], dim=16,
                    length=layout["bag_start"] or None)
    conv = net.add("relu", "activation", net.add("conv", "conv1d", embed, filters=16, kernel_size=3), fn="relu")
    net.head(net.global_pools(conv, "avg")[0], 0, 0.0, classes)
    return net.spec("words", {"shape": [length], "dtype": "int32", "modality": "text"}, classes)


def trained(spec: Spec, x: np.ndarray, y: np.ndarray, epochs: int, learning_rate: float = 3e-3) -> dict[str, Any]:
    """`spec`'s weights after `epochs` on (x, y), validated on its last sixth (no augmentation)."""
    cut = len(y) * 5 // 6
    data = Dataset(x[:cut], y[:cut], x[cut:], y[cut:])
    config = TrainConfig(epochs=epochs, learning_rate=learning_rate, max_shift=0, patience=None)
    return train(build(spec), data, config).variables


def on_object(maps: np.ndarray, boxes: np.ndarray) -> float:
    """The fraction of maps whose argmax falls inside its image's object box (localisation)."""
    hits = []
    for m, (top, left, bottom, right) in zip(maps, boxes, strict=True):
        r, c = np.unravel_index(np.argmax(m), m.shape)
        hits.append(top <= r < bottom and left <= c < right)
    return float(np.mean(hits))


def on_keyword(scores: list[np.ndarray], where: np.ndarray) -> float:
    """The fraction of texts whose highest-scoring word is the keyword deciding the class."""
    return float(np.mean([int(np.argmax(s)) == w for s, w in zip(scores, where, strict=True)]))

