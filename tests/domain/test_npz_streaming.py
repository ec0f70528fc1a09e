"""Inspecting an npz upload reads its images a batch at a time: validation never holds the whole array."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np

from domain.ingest import Limits, inspect_file, load_file
from domain.ingest.results import ImageData
from tests.datasets import write_npz


def _peak_inspecting(path: Path) -> tuple[int, dict[str, int]]:
    tracemalloc.start()
    try:
        found = inspect_file(path, path.name, Limits())
        return tracemalloc.get_traced_memory()[1], found.class_counts
    finally:
        tracemalloc.stop()


def test_inspecting_an_npz_holds_a_batch_not_the_array(tmp_path: Path) -> None:
    """The memory validation and profiling take does not grow with the array: three times the images (36 MiB
    more) raise the peak by under 8 MiB; loading still gives every image, and the profile counts every sample
    (a duplicate pair is found across batches)."""
    rng = np.random.default_rng(0)
    paths = []
    for rows in (6_000, 18_000):
        x = rng.integers(0, 256, (rows, 64, 64, 1), dtype=np.uint8)
        x[rows - 1] = x[0]
        paths.append(write_npz(tmp_path / f"n{rows}.npz", x=x, y=np.arange(rows) % 3))
    del x
    (small, small_counts), (large, large_counts) = (_peak_inspecting(p) for p in paths)
    assert small_counts == {"0": 2000, "1": 2000, "2": 2000} and sum(large_counts.values()) == 18_000
    assert large - small < 8 * 2**20, (small, large)
    assert inspect_file(paths[1], "x.npz", Limits()).profile["duplicates"]["count"] == 1
    data = load_file(paths[1], "npz", Limits())
    assert isinstance(data, ImageData) and data.x.shape == (18_000, 64, 64, 1)


def test_a_batch_with_nan_is_refused_wherever_it_is(tmp_path: Path) -> None:
    x = np.zeros((3000, 8, 8), np.float32)
    x[2500, 3, 3] = np.nan
    path = write_npz(tmp_path / "nan.npz", x=x, y=np.arange(3000) % 2)
    try:
        inspect_file(path, "nan.npz", Limits())
    except Exception as exc:  # DatasetRejected
        assert "NaN" in str(exc)
    else:
        raise AssertionError("an npz with NaN pixels was accepted")
