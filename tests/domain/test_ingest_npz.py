"""npz uploads: keys, dtypes and shapes checked from the .npy headers, pickles refused, arrays loaded."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from domain.ingest import Limits, inspect_file
from domain.ingest.resize import fit_pixels
from tests.datasets import digits_arrays, load_images, rejection, write_npz, write_zip

FEW = Limits(min_samples_per_class=1)






def test_x_and_y_inspect_and_load(tmp_path: Path) -> None:
    x, y = digits_arrays()
    path = write_npz(tmp_path / "digits.npz", x=x[..., 0], y=y)
    inspection = inspect_file(path, "digits.npz", Limits())
    assert (inspection.format, inspection.modality, inspection.sample_count) == ("npz", "image", 1797)
    assert inspection.classes == [str(d) for d in range(10)]
    image = inspection.profile["image"]
    assert (image["height"], image["width"], image["channels"], image["dtype"]) == (8, 8, 1, "uint8")
    assert "npz_test_samples" not in inspection.profile
    data = load_images(path, "npz", Limits())
    np.testing.assert_array_equal(data.x, x)
    np.testing.assert_array_equal(data.y, y)


def test_train_and_test_keys_load_the_train_split_and_count_the_test_split(tmp_path: Path) -> None:
    x, y = digits_arrays()
    path = tmp_path / "digits.npz"
    np.savez_compressed(path, x_train=x[:1500], y_train=y[:1500], x_test=x[1500:], y_test=y[1500:])
    inspection = inspect_file(path, "digits.npz", Limits())
    assert inspection.sample_count == 1500
    assert inspection.profile["npz_test_samples"] == 297
    np.testing.assert_array_equal(load_images(path, "npz", FEW).x, x[:1500])


def test_float_images_stay_floats_and_string_labels_become_classes(tmp_path: Path) -> None:
    x = np.random.default_rng(0).random((6, 4, 4, 3))
    labels = np.array(["dog", "cat", "dog", "cat", "bird", "bird"])
    inspection = inspect_file(write_npz(tmp_path / "data.npz", x=x, y=labels), "data.npz", FEW)
    assert inspection.classes == ["bird", "cat", "dog"]
    assert inspection.profile["image"]["dtype"] == "float32"
    assert inspection.profile["image"]["mean"] == pytest.approx(x.reshape(-1, 3).mean(axis=0).tolist(), abs=1e-5)
    data = load_images(tmp_path / "data.npz", "npz", FEW)
    assert data.x.dtype == np.float32
    np.testing.assert_allclose(data.x, x, rtol=1e-6)
    np.testing.assert_array_equal(data.y, [2, 1, 2, 1, 0, 0])


def test_fortran_ordered_arrays_load_correctly(tmp_path: Path) -> None:
    x = np.asfortranarray(np.arange(6 * 3 * 2, dtype=np.uint8).reshape(6, 3, 2))
    path = write_npz(tmp_path / "f.npz", x=x, y=np.arange(6) % 2)
    np.testing.assert_array_equal(load_images(path, "npz", FEW).x[..., 0], x)


def test_missing_keys_are_listed(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "data.npz", images=np.zeros((4, 2, 2), np.uint8), targets=np.zeros(4))
    error = rejection(path, FEW)
    assert error.reason == "malformed-npz"
    assert "images" in error.detail and "targets" in error.detail


def test_object_arrays_are_refused_without_unpickling(tmp_path: Path) -> None:
    labels = np.array([{"a": 1}, "b", 3, None], dtype=object)
    path = tmp_path / "data.npz"
    np.savez(path, x=np.zeros((4, 2, 2), np.uint8), y=labels, allow_pickle=True)
    error = rejection(path, FEW)
    assert (error.reason, "pickles" in error.detail) == ("malformed-npz", True)


@pytest.mark.parametrize(
    ("x", "y"),
    [
        (np.full((4, 2, 2), np.nan, np.float32), np.arange(4)),  # not finite
        (np.zeros((4, 2, 2), np.int64), np.arange(4)),  # neither uint8 nor float
        (np.zeros((4, 2, 2, 2), np.uint8), np.arange(4)),  # two channels
        (np.zeros((4, 2), np.uint8), np.arange(4)),  # not images
        (np.zeros((4, 2, 2), np.uint8), np.arange(3)),  # labels of another length
        (np.zeros((4, 2, 2), np.uint8), np.zeros(4)),  # float labels
        (np.zeros((4, 2, 2), np.uint8), np.zeros((4, 1), np.int64)),  # 2-D labels
    ],
)
def test_bad_arrays_are_malformed(tmp_path: Path, x: np.ndarray, y: np.ndarray) -> None:
    assert rejection(write_npz(tmp_path / "data.npz", x=x, y=y), FEW).reason == "malformed-npz"


def test_a_test_split_without_its_labels_is_malformed(tmp_path: Path) -> None:
    x = np.zeros((4, 2, 2), np.uint8)
    path = write_npz(tmp_path / "data.npz", x_train=x, y_train=np.arange(4) % 2, x_test=x)
    assert rejection(path, FEW).reason == "malformed-npz"


def test_images_over_the_side_limit_are_refused(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "data.npz", x=np.zeros((4, 2, 9), np.uint8), y=np.arange(4) % 2)
    assert rejection(path, Limits(min_samples_per_class=1, max_image_side=8)).reason == "image-too-large"


def test_an_npz_bomb_is_refused_from_its_zip_structure(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    np.savez_compressed(path, x=np.zeros((200, 256, 256), np.uint8), y=np.arange(200) % 2)
    assert rejection(path, FEW).reason == "zip-bomb"


def test_an_array_header_claiming_more_data_than_stored_is_malformed(tmp_path: Path) -> None:
    def npy(array: np.ndarray) -> bytes:
        buffer = io.BytesIO()
        np.save(buffer, array)
        return buffer.getvalue()

    x = npy(np.zeros((4, 2, 2), np.uint8)).replace(b"'shape': (4, 2, 2)", b"'shape': (4, 2, 9)")
    path = write_zip(tmp_path / "data.npz", [("x.npy", x), ("y.npy", npy(np.arange(4) % 2))])
    error = rejection(path, FEW)
    assert (error.reason, "declares more data" in error.detail) == ("malformed-npz", True)


def test_large_npz_images_are_scaled_down(tmp_path: Path) -> None:
    x = np.random.default_rng(5).integers(0, 256, (6, 128, 96), dtype=np.uint8)
    path = write_npz(tmp_path / "big.npz", x=x, y=np.array([0, 1] * 3))
    image = inspect_file(path, "big.npz", FEW).profile["image"]
    assert (image["height"], image["width"], image["resized"], image["resize"]["reason"]) == (64, 48, True,
                                                                                            "too-large")
    data = load_images(path, "npz", FEW)
    np.testing.assert_array_equal(data.x, fit_pixels(x[..., None], (64, 48)))
