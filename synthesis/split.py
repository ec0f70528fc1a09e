"""Stratified train / validation / test splits with a recorded seed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.data import Dataset


@dataclass(frozen=True)
class Split:
    """Row indices of each part of a dataset."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    seed: int


def stratified_split(y: np.ndarray, seed: int, val_fraction: float = 0.1, test_fraction: float = 0.1,
                     groups: np.ndarray | None = None) -> Split:
    """Split row indices so each class keeps its proportion in every part; every class keeps >= 1 training row.

    A class of n rows puts round(n * fraction) rows (at least one when n >= 3) into validation and into test.
    Rows with the same `groups` value (e.g. exact duplicates) always land in the same part; a group is
    stratified by its first row's class.
    """
    if groups is not None:
        keys, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
        by_group = stratified_split(y[first], seed, val_fraction, test_fraction)
        part = np.empty(len(keys), np.int8)
        part[by_group.train], part[by_group.val], part[by_group.test] = 0, 1, 2
        rows = part[inverse.reshape(-1)]
        train, val, test = (np.flatnonzero(rows == k).astype(np.int64) for k in range(3))
        return Split(train=train, val=val, test=test, seed=seed)
    if not 0 <= val_fraction < 1 or not 0 <= test_fraction < 1 or val_fraction + test_fraction >= 1:
        raise ValueError("val_fraction and test_fraction must be in [0, 1) and sum below 1")
    rng = np.random.default_rng(seed)
    parts: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    for cls in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == cls))
        n = len(rows)
        n_val = max(round(n * val_fraction), 1 if n >= 3 and val_fraction > 0 else 0)
        n_test = max(round(n * test_fraction), 1 if n >= 3 and test_fraction > 0 else 0)
        n_val, n_test = min(n_val, max(n - 1, 0)), min(n_test, max(n - 1 - n_val, 0))
        parts[1].append(rows[:n_val])
        parts[2].append(rows[n_val:n_val + n_test])
        parts[0].append(rows[n_val + n_test:])
    train, val, test = (np.sort(np.concatenate(p)).astype(np.int64) for p in parts)
    return Split(train=train, val=val, test=test, seed=seed)


def stratified_sample(y: np.ndarray, rows: int, seed: int) -> np.ndarray:
    """Sorted indices of about `rows` rows drawn without replacement, each class in its proportion (at least
    one row of every class); all rows when there are no more than `rows`."""
    if rows >= len(y):
        return np.arange(len(y), dtype=np.int64)
    rng = np.random.default_rng(seed)
    picked = [rng.permutation(members)[:max(round(len(members) * rows / len(y)), 1)]
              for members in (np.flatnonzero(y == cls) for cls in np.unique(y))]
    return np.sort(np.concatenate(picked)).astype(np.int64)


def training_sample(data: Dataset, rows: int, seed: int) -> Dataset:
    """`data` with its training rows cut to a stratified sample of about `rows` (:func:`stratified_sample`) and its
    validation rows whole; `data` itself when it has no more than `rows` training rows."""
    if len(data.y_train) <= rows:
        return data
    picked = stratified_sample(data.y_train, rows, seed)
    return Dataset(data.x_train[picked], data.y_train[picked], data.x_val, data.y_val)
