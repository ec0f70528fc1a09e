"""Running summaries of a dataset for its profile: pixel statistics, text lengths and duplicate counts."""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Hashable
from typing import Any

import numpy as np

from domain.ingest.text import tokenize

LABEL_BITS = 16
"""The low bits of a duplicate key that hold the label's id (datasets have at most `Settings.max_classes` labels)."""


class Duplicates:
    """Counts exact duplicate inputs and inputs seen with more than one label, in 8 bytes per sample: a 48-bit
    BLAKE2b digest of the input above a 16-bit label id, sorted in place once at the end. A dict of digests took
    about 140 bytes per distinct input (148 MiB for the 1 GB CSV of 1.06 M texts of bench/load.py). Two distinct
    inputs share a digest with probability about n^2 / 2^49 (2e-6 for a million samples)."""

    def __init__(self) -> None:
        self._keys = array("Q")
        self._label_ids: dict[Hashable, int] = {}

    def add(self, key: bytes, label: Hashable) -> None:
        """Record one sample by its input's bytes and its label."""
        digest = int.from_bytes(hashlib.blake2b(key, digest_size=6).digest(), "little")
        label_id = self._label_ids.setdefault(label, len(self._label_ids)) & ((1 << LABEL_BITS) - 1)
        self._keys.append(digest << LABEL_BITS | label_id)

    def summary(self) -> dict[str, int]:
        """`count`: samples repeating an earlier input; `conflicting`: inputs seen with different labels."""
        if not self._keys:
            return {"count": 0, "conflicting": 0}
        keys = np.array(self._keys, dtype=np.uint64)
        keys.sort()
        new_input = np.empty(len(keys), dtype=bool)
        new_input[0] = True
        np.not_equal(keys[1:] >> LABEL_BITS, keys[:-1] >> LABEL_BITS, out=new_input[1:])
        new_pair = np.empty(len(keys), dtype=bool)
        new_pair[0] = True
        np.not_equal(keys[1:], keys[:-1], out=new_pair[1:])
        del keys
        starts = np.flatnonzero(new_input)
        labels_per_input = np.add.reduceat(new_pair, starts, dtype=np.int64)
        return {"count": int(len(new_input) - len(starts)), "conflicting": int((labels_per_input > 1).sum())}


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
