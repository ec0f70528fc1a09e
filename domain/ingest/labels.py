"""Class names: their order, their indices, and the refusals about how many there are."""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Mapping

import numpy as np

from domain.errors import DatasetRejected
from domain.ingest.limits import Limits

_INTEGER = re.compile(r"-?[0-9]+")
_LISTED = 10


def order_classes(names: Iterable[str]) -> list[str]:
    """The names sorted: numerically when every name is an integer, else as strings."""
    unique = set(names)
    if unique and all(_INTEGER.fullmatch(name) for name in unique):
        return sorted(unique, key=lambda name: (int(name), name))
    return sorted(unique)


def check_classes(counts: Mapping[str, int], limits: Limits) -> None:
    """Refuse a dataset with no samples, too few or too many classes, or a class with too few samples."""
    if sum(counts.values()) == 0:
        raise DatasetRejected("empty", "the dataset contains no samples")
    if len(counts) < 2:
        found = ", ".join(repr(name) for name in counts)
        raise DatasetRejected("too-few-classes", f"found {len(counts)} class ({found}); at least 2 are needed")
    if len(counts) > limits.max_classes:
        raise DatasetRejected(
            "too-many-classes", f"found {len(counts)} classes; at most {limits.max_classes} are allowed")
    small = sorted((count, name) for name, count in counts.items() if count < limits.min_samples_per_class)
    if small:
        listed = ", ".join(f"{name!r} ({count})" for count, name in small[:_LISTED])
        more = f" and {len(small) - _LISTED} more" if len(small) > _LISTED else ""
        raise DatasetRejected(
            "too-few-samples",
            f"every class needs at least {limits.min_samples_per_class} samples; too few in {listed}{more}")


class LabelIndexer:
    """Collects one label name per sample and maps them, at the end, to indices into the ordered classes; with
    `keep` False only counts them (what a profile needs: no memory per sample)."""

    def __init__(self, keep: bool = True) -> None:
        self._ids: dict[str, int] = {}
        self._counts: list[int] = []
        self._samples: array[int] | None = array("q") if keep else None

    def add(self, name: str) -> None:
        """Record the next sample's label."""
        index = self._ids.setdefault(name, len(self._ids))
        if index == len(self._counts):
            self._counts.append(0)
        self._counts[index] += 1
        if self._samples is not None:
            self._samples.append(index)

    def finish(self, limits: Limits) -> tuple[list[str], dict[str, int], np.ndarray]:
        """The ordered classes, their counts and the int64 label index of every sample (none when not kept);
        refuse bad class counts."""
        classes = order_classes(self._ids)
        counts = {name: self._counts[self._ids[name]] for name in classes}
        check_classes(counts, limits)
        position = {name: i for i, name in enumerate(classes)}
        remap = np.array([position[name] for name in self._ids], dtype=np.int64)
        samples = self._samples if self._samples is not None else array("q")
        return classes, counts, remap[np.frombuffer(samples, dtype=np.int64)]
