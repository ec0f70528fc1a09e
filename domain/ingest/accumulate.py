"""Samples accumulated, as a parser yields them, into either arrays (to load) or a profile (to inspect)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from domain.ingest.labels import LabelIndexer
from domain.ingest.limits import Limits
from domain.ingest.profile import Duplicates, PixelStats, TextStats, pixel_key
from domain.ingest.resize import ResizePlan
from domain.ingest.results import ImageData, TextData

_STATS_BATCH = 1024


def _classes_part(labels: LabelIndexer, limits: Limits) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    classes, counts, y = labels.finish(limits)
    return classes, y, {"class_counts": counts, "sample_count": sum(counts.values())}


class ImageAccumulator:
    """Images [H, W, C] with labels, already brought to one size by the resize `plan`: kept as arrays when
    `keep`, else summarised for a profile."""

    def __init__(self, keep: bool, plan: ResizePlan) -> None:
        self._plan = plan
        self._labels = LabelIndexer(keep)
        self._shapes: Counter[tuple[int, int]] = Counter()
        self._channels: set[int] = set()
        self._dtype = "uint8"
        self._resized = False
        self._kept: list[np.ndarray] | None = [] if keep else None
        self._stats = PixelStats()
        self._duplicates = Duplicates()

    def add(self, labels: Sequence[str], batch: np.ndarray, resized: bool = False) -> None:
        """Add a batch of images [n, H, W, C] and their n labels."""
        for label in labels:
            self._labels.add(label)
        self._shapes[batch.shape[1:3]] += batch.shape[0]
        self._channels.add(batch.shape[3])
        self._dtype = str(batch.dtype)
        self._resized = self._resized or resized
        if self._kept is not None:
            self._kept.append(batch)
            return
        for start in range(0, batch.shape[0], _STATS_BATCH):
            self._stats.add(batch[start : start + _STATS_BATCH])
        for label, pixels in zip(labels, batch, strict=True):
            self._duplicates.add(pixel_key(pixels), label)

    def shape(self) -> tuple[int, int, int]:
        """The one (H, W, C) of the dataset (gray images count as RGB when any is RGB)."""
        if len(self._shapes) > 1:  # the resize plan brings every image to one size before it is added
            raise ValueError(f"images of {len(self._shapes)} sizes were read; resize them to one first")
        height, width = next(iter(self._shapes), (0, 0))
        return height, width, max(self._channels, default=1)

    def data(self, limits: Limits) -> ImageData:
        """The images as one array, with label indices and classes."""
        classes, y, _ = _classes_part(self._labels, limits)
        height, width, channels = self.shape()
        kept = self._kept or []
        if len(kept) == 1 and kept[0].shape[3] == channels:
            return ImageData(np.ascontiguousarray(kept[0]), y, classes)
        x = np.empty((y.shape[0], height, width, channels), dtype=self._dtype)
        at = 0
        for batch in kept:
            x[at : at + batch.shape[0]] = batch  # a gray batch broadcasts into RGB
            at += batch.shape[0]
        return ImageData(x, y, classes)

    def profile(self, limits: Limits) -> dict[str, Any]:
        """The profile's class, duplicate and image parts."""
        _, _, part = _classes_part(self._labels, limits)
        height, width, channels = self.shape()
        image = {"height": height, "width": width, "channels": channels, "dtype": self._dtype,
                 **self._stats.summary(channels), "resized": self._resized, "resize": self._plan.profile()}
        return {**part, "duplicates": self._duplicates.summary(), "modality": "image", "image": image}


class TextAccumulator:
    """Texts with labels: kept when `keep`, else summarised for a profile."""

    def __init__(self, keep: bool) -> None:
        self._labels = LabelIndexer(keep)
        self._kept: list[str] | None = [] if keep else None
        self._stats = TextStats()
        self._duplicates = Duplicates()

    def add(self, text: str, label: str) -> None:
        """Add one text and its label."""
        self._labels.add(label)
        if self._kept is not None:
            self._kept.append(text)
        else:
            self._stats.add(text)
            self._duplicates.add(text.encode("utf-8"), label)

    def data(self, limits: Limits) -> TextData:
        """The texts, label indices and classes."""
        classes, y, _ = _classes_part(self._labels, limits)
        return TextData(self._kept or [], y, classes)

    def profile(self, limits: Limits) -> dict[str, Any]:
        """The profile's class, duplicate and text parts."""
        _, _, part = _classes_part(self._labels, limits)
        return {**part, "duplicates": self._duplicates.summary(), "modality": "text", "text": self._stats.summary()}
