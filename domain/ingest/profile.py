"""Running summaries of a dataset for its profile: pixel statistics, text lengths and duplicate counts."""

from __future__ import annotations

import hashlib
import tempfile
from array import array
from collections.abc import Hashable, Iterator
from typing import IO, Any

import numpy as np

from domain.ingest.text import tokenize

LABEL_BITS = 16
"""The low bits of a duplicate key that hold the label's id (datasets have at most `Settings.max_classes` labels)."""
_STATS_VALUES = 64 * 1024  # pixels converted to float64 at once for the statistics


class Duplicates:
    """Counts exact duplicate inputs and inputs seen with more than one label, in 8 bytes per sample: a 48-bit
    BLAKE2b digest of the input above a 16-bit label id. Up to SPILL_KEYS keys are held in memory; past that they
    are written to a temporary file in PARTS parts by their digest's first bits (a duplicate always lands in the
    same part as its first), and each part is sorted and counted alone at the end, so the memory held stays
    about SPILL_KEYS keys plus one part, whatever the number of samples. (A dict of digests took about 140 bytes
    per distinct input: 148 MiB for the 1 GB CSV of 1.06 M texts of bench/load.py.) Two distinct inputs share a
    digest with probability about n^2 / 2^49 (2e-6 for a million samples)."""

    SPILL_KEYS = 1 << 18
    PARTS = 256

    def __init__(self) -> None:
        self._keys = array("Q")
        self._label_ids: dict[Hashable, int] = {}
        self._spill: IO[bytes] | None = None
        self._segments: list[list[tuple[int, int]]] = [[] for _ in range(self.PARTS)]

    def add(self, key: bytes, label: Hashable) -> None:
        """Record one sample by its input's bytes and its label."""
        digest = int.from_bytes(hashlib.blake2b(key, digest_size=6).digest(), "little")
        label_id = self._label_ids.setdefault(label, len(self._label_ids)) & ((1 << LABEL_BITS) - 1)
        self._keys.append(digest << LABEL_BITS | label_id)
        if len(self._keys) >= self.SPILL_KEYS:
            self._flush()

    def _flush(self) -> None:
        """Append the keys held to the spill file, each part's keys together."""
        if self._spill is None:
            self._spill = tempfile.TemporaryFile(prefix="netsynth-duplicates-")  # noqa: SIM115 (closed by summary)
        keys = np.array(self._keys, dtype=np.uint64)
        self._keys = array("Q")
        parts = (keys >> np.uint64(64 - _PART_BITS)).astype(np.intp)
        order = np.argsort(parts, kind="stable")
        keys, bounds = keys[order], np.searchsorted(parts[order], np.arange(self.PARTS + 1))
        for part in range(self.PARTS):
            if bounds[part + 1] > bounds[part]:
                self._segments[part].append((self._spill.tell(), int(bounds[part + 1] - bounds[part])))
                self._spill.write(keys[bounds[part] : bounds[part + 1]].tobytes())

    def _parts(self) -> Iterator[np.ndarray]:
        """The keys, all of them at once when they were never spilled, else one part at a time."""
        if self._spill is None:
            yield np.array(self._keys, dtype=np.uint64)
            return
        self._flush()
        for segments in self._segments:
            keys = np.empty(sum(count for _, count in segments), dtype=np.uint64)
            at = 0
            for offset, count in segments:
                self._spill.seek(offset)
                keys[at : at + count] = np.frombuffer(self._spill.read(count * 8), dtype=np.uint64)
                at += count
            yield keys

    def summary(self) -> dict[str, int]:
        """`count`: samples repeating an earlier input; `conflicting`: inputs seen with different labels."""
        count = conflicting = 0
        try:
            for keys in self._parts():
                repeated, mixed = _count_duplicates(keys)
                count, conflicting = count + repeated, conflicting + mixed
        finally:
            if self._spill is not None:
                self._spill.close()
                self._spill = None
        return {"count": count, "conflicting": conflicting}


_PART_BITS = 8  # log2(Duplicates.PARTS)


def _count_duplicates(keys: np.ndarray) -> tuple[int, int]:
    """(samples repeating an earlier input, inputs seen with different labels) among `keys`, sorted in place."""
    if not len(keys):
        return 0, 0
    keys.sort()
    new_input = np.empty(len(keys), dtype=bool)
    new_input[0] = True
    np.not_equal(keys[1:] >> LABEL_BITS, keys[:-1] >> LABEL_BITS, out=new_input[1:])
    new_pair = np.empty(len(keys), dtype=bool)
    new_pair[0] = True
    np.not_equal(keys[1:], keys[:-1], out=new_pair[1:])
    starts = np.flatnonzero(new_input)
    labels_per_input = np.add.reduceat(new_pair, starts, dtype=np.int64)
    return int(len(new_input) - len(starts)), int((labels_per_input > 1).sum())


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
        """Add a batch of images, converted to float64 a block of _STATS_VALUES pixels at a time."""
        channels = batch.shape[-1]
        pixels = batch.reshape(-1, channels)
        self._n[channels] += pixels.shape[0]
        for start in range(0, pixels.shape[0], _STATS_VALUES):
            values = pixels[start : start + _STATS_VALUES].astype(np.float64)
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


class Spread:
    """The spread of non-negative integers (lengths), kept as how many times each value was seen: the memory it
    takes grows with the distinct values (at most the longest length), not with how many were added."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def add(self, value: int) -> None:
        """Add one value."""
        self._counts[value] = self._counts.get(value, 0) + 1

    def count(self, value: int) -> int:
        """How many times `value` was added."""
        return self._counts.get(value, 0)

    def summary(self) -> dict[str, float]:
        """Min, mean, median, 95th percentile and max, as numpy's mean, median and linear percentile give them for
        every value added (the values are not empty)."""
        values = np.array(sorted(self._counts), dtype=np.int64)
        counts = np.array([self._counts[int(v)] for v in values], dtype=np.int64)
        ends = np.cumsum(counts)
        n = int(ends[-1])

        def nth(k: int) -> int:  # the k-th smallest value, from 0
            return int(values[np.searchsorted(ends, k, side="right")])

        position = (95 / 100) * (n - 1)
        low = int(np.floor(position))
        a, b, t = float(nth(low)), float(nth(min(low + 1, n - 1))), position - low
        p95 = b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t  # numpy's _lerp
        return {
            "min": float(values[0]), "mean": round(float(np.dot(values, counts)) / n, 3),
            "median": (nth((n - 1) // 2) + nth(n // 2)) / 2, "p95": float(p95), "max": float(values[-1]),
        }


class TextStats:
    """Character and word counts of texts, and how many have no word at all (``empty``: kept, as real input)."""

    def __init__(self) -> None:
        self._chars = Spread()
        self._words = Spread()

    def add(self, text: str) -> None:
        """Add one text."""
        self._chars.add(len(text))
        self._words.add(len(tokenize(text)))

    def summary(self) -> dict[str, Any]:
        """The spread of character and word counts."""
        return {"chars": self._chars.summary(), "words": self._words.summary(),
                "empty": self._words.count(0)}
