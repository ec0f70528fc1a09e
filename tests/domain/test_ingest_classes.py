"""Class-level refusals, common to every format: too few or too many classes, too few samples per class."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from domain.errors import DatasetRejected
from domain.ingest import Limits, load_file
from tests.datasets import digits_arrays, rejection, write_image_zip, write_text_tsv


def test_a_single_class_is_refused(tmp_path: Path) -> None:
    x, _ = digits_arrays()
    path = write_image_zip(tmp_path / "one.zip", x[:10], np.zeros(10, np.int64), classes=["cat"])
    error = rejection(path, Limits())
    assert (error.reason, "'cat'" in error.detail) == ("too-few-classes", True)


def test_more_classes_than_allowed_are_refused(tmp_path: Path) -> None:
    path = write_text_tsv(tmp_path / "d.tsv", [f"text {i}" for i in range(8)], [str(i % 4) for i in range(8)])
    error = rejection(path, Limits(min_samples_per_class=1, max_classes=3))
    assert (error.reason, "4 classes" in error.detail) == ("too-many-classes", True)


def test_classes_with_too_few_samples_are_named_with_their_counts(tmp_path: Path) -> None:
    labels = ["big"] * 6 + ["small"] * 2 + ["tiny"]
    path = write_text_tsv(tmp_path / "d.tsv", [f"text {i}" for i in range(9)], labels)
    error = rejection(path, Limits())
    assert error.reason == "too-few-samples"
    assert "'small' (2)" in error.detail and "'tiny' (1)" in error.detail and "big" not in error.detail


def test_load_applies_the_same_class_checks(tmp_path: Path) -> None:
    path = write_text_tsv(tmp_path / "d.tsv", ["a", "b", "c"], ["x", "x", "x"])
    with pytest.raises(DatasetRejected) as caught:
        load_file(path, "tsv", Limits(min_samples_per_class=1))
    assert caught.value.reason == "too-few-classes"
