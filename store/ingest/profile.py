"""Running summaries of a dataset for its profile: pixel statistics, text lengths and duplicate counts."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Hashable
from typing import Any

import numpy as np

from store.ingest.text import tokenize


class Duplicates:
    """Counts exact duplicate inputs and inputs seen with more than one label, in 16 bytes per sample (an 8-byte
    BLAKE2b digest of the input and a label id), so a dataset of millions of rows is profiled in tens of MB: a
    dict of digests took about 140 bytes per distinct input (148 MiB for a 1 GB CSV of 1.06 M texts, bench/load.py).
    Two distinct inputs share a digest with probability about n^2 / 2^65 (3e-8 for a million)."""

    def __init__(self) -> None:
        self._digests = array("Q")
        self._labels = array("q")
        self._label_ids: dict[Hashable, int] = {}

    def add(self, key: bytes, label: Hashable) -> None:
        """Record one sample by its input's bytes and its label."""
        self._digests.append(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little"))
        self._labels.append(self._label_ids.setdefault(label, len(self._label_ids)))

    def summary(self) -> dict[str, int]:
        """`count`: samples repeating an earlier input; `conflicting`: inputs seen with different labels."""
        if not self._digests:
            return {"count": 0, "conflicting": 0}
        digests = np.frombuffer(self._digests, dtype=np.uint64)
        labels = np.frombuffer(self._labels, dtype=np.int64)
        order = np.lexsort((labels, digests))
        digests, labels = digests[order], labels[order]
        new_input = np.concatenate([[True], digests[1:] != digests[:-1]])
        new_pair = new_input | np.concatenate([[True], labels[1:] != labels[:-1]])
        labels_per_input = np.add.reduceat(new_pair.astype(np.int64), np.flatnonzero(new_input))
        return {"count": int(len(digests) - new_input.sum()), "conflicting": int((labels_per_input > 1).sum())}


def pixel_key(pixels: np.ndarray) -> bytes:
    """The bytes identifying an image [H, W, C]; a gray image and its RGB copy share a key."""
    if pixels.shape[-1] == 3 and np.array_equal(pixels[..., 0:1], pixels[..., 1:2]) and np.array_equal(
            pixels[..., 0:1], pixels[..., 2:3]):
        pixels = pixels[..., 0:1]
    header = np.array(pixels.shape, dtype=np.int64).tobytes() + pixels.dtype.str.encode()
    return header + np.ascontiguousarray(pixels).tobytes()


class PixelStats:
    """Per-channel mean and standard deviation over batches of images [N, H, W, C] with C = 1 or 3."""

    def __init__(self) -> None:
        self._n = {1: 0, 3: 0}
        self._sum = {1: np.zeros(1), 3: np.zeros(3)}
        self._squares = {1: np.zeros(1), 3: np.zeros(3)}

    def add(self, batch: np.ndarray) -> None:
        """Add a batch of images."""
        channels = batch.shape[-1]
        values = batch.reshape(-1, channels).astype(np.float64)
        self._n[channels] += values.shape[0]
        self._sum[channels] += values.sum(axis=0)
        self._squares[channels] += np.square(values).sum(axis=0)

    def summary(self, channels: int) -> dict[str, list[float]]:
        """Mean and std per channel, gray images counting in every channel when `channels` is 3."""
        n = self._n[1] + (self._n[3] if channels == 3 else 0)
        total = self._sum[1] + (self._sum[3] if channels == 3 else 0)
        squares = self._squares[1] + (self._squares[3] if channels == 3 else 0)
        mean = total / max(n, 1)
        std = np.sqrt(np.maximum(squares / max(n, 1) - np.square(mean), 0.0))
        return {"mean": [round(float(v), 6) for v in mean], "std": [round(float(v), 6) for v in std]}


def spread(values: np.ndarray) -> dict[str, float]:
    """Min, mean, median, 95th percentile and max of a non-empty array."""
    return {
        "min": float(values.min()), "mean": round(float(values.mean()), 3), "median": float(np.median(values)),
        "p95": float(np.percentile(values, 95)), "max": float(values.max()),
    }


class TextStats:
    """Character and word counts of texts, and how many have no word at all (``empty``: kept, as real input)."""

    def __init__(self) -> None:
        self._chars = array("q")
        self._words = array("q")

    def add(self, text: str) -> None:
        """Add one text."""
        self._chars.append(len(text))
        self._words.append(len(tokenize(text)))

    def summary(self) -> dict[str, Any]:
        """The spread of character and word counts."""
        chars = np.frombuffer(self._chars, dtype=np.int64)
        words = np.frombuffer(self._words, dtype=np.int64)
        return {"chars": spread(chars), "words": spread(words), "empty": int(np.sum(words == 0))}
