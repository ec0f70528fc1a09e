"""Image folders in a zip: layout, decoding, shapes, resizing and the image part of the profile."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from domain.ingest import Limits, inspect_file
from domain.ingest.resize import MAX_NATIVE_SIDE, fit_pixels
from tests.datasets import digits_arrays, load_images, png_bytes, rejection, write_image_zip, write_zip

FEW = Limits(min_samples_per_class=1)
RNG = np.random.default_rng(7)


def _gray(side: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (side, side, 1), dtype=np.uint8)


@pytest.mark.parametrize("root", [None, "digits"])
def test_digits_zip_inspects_and_loads_back_pixel_identical(tmp_path: Path, root: str | None) -> None:
    x, y = digits_arrays()
    path = write_image_zip(tmp_path / "digits.zip", x, y, root=root)
    inspection = inspect_file(path, "digits.zip", Limits())
    assert (inspection.format, inspection.modality, inspection.sample_count) == ("image_zip", "image", 1797)
    assert inspection.classes == [str(d) for d in range(10)]
    assert inspection.class_counts == {str(d): int((y == d).sum()) for d in range(10)}
    image = inspection.profile["image"]
    assert (image["height"], image["width"], image["channels"], image["dtype"]) == (8, 8, 1, "uint8")
    assert image["mean"] == pytest.approx([x.mean()], abs=1e-4)
    assert image["std"] == pytest.approx([x.std()], abs=1e-4)
    assert image["resized"] is False
    assert json.loads(json.dumps(inspection.profile)) == inspection.profile
    data = load_images(path, "image_zip", Limits())
    assert data.x.dtype == np.uint8 and data.y.dtype == np.int64
    np.testing.assert_array_equal(data.x, x)
    np.testing.assert_array_equal(data.y, y)
    assert data.classes == inspection.classes


def test_class_folders_sort_numerically(tmp_path: Path) -> None:
    x = np.stack([_gray(seed=i) for i in range(6)])
    path = write_image_zip(tmp_path / "data.zip", x, np.array([0, 1, 2] * 2), classes=["10", "9", "100"])
    assert inspect_file(path, "data.zip", FEW).classes == ["9", "10", "100"]
    np.testing.assert_array_equal(load_images(path, "image_zip", FEW).y, [1, 0, 2] * 2)


def test_rgb_jpeg_folders_load_as_three_channels(tmp_path: Path) -> None:
    ramp = np.linspace(0, 255, 32, dtype=np.float64)
    x = np.stack([np.stack([np.add.outer(ramp, ramp) / 2, np.tile(ramp, (32, 1)), np.full((32, 32), 40.0 * k)],
                           axis=-1) for k in range(6)]).astype(np.uint8)
    path = write_image_zip(tmp_path / "photos.zip", x, np.array([0, 1] * 3), classes=["cat", "dog"], fmt="JPEG")
    inspection = inspect_file(path, "photos.zip", FEW)
    assert inspection.profile["image"]["channels"] == 3
    assert len(inspection.profile["image"]["mean"]) == 3
    data = load_images(path, "image_zip", FEW)
    assert data.x.shape == (6, 32, 32, 3) and data.classes == ["cat", "dog"]
    assert np.abs(data.x.astype(int) - x).mean() < 3  # JPEG is lossy, but close on smooth images


def test_hidden_files_macos_leftovers_and_directories_are_ignored(tmp_path: Path) -> None:
    members = [("a/", b""), ("a/1.png", png_bytes(_gray(seed=1))), ("b/1.png", png_bytes(_gray(seed=2))),
               ("a/.DS_Store", b"junk"), ("__MACOSX/a/._1.png", b"junk"), (".hidden/x.png", b"junk"),
               ("b/Thumbs.db", b"junk")]
    inspection = inspect_file(write_zip(tmp_path / "data.zip", members), "data.zip", FEW)
    assert inspection.class_counts == {"a": 1, "b": 1}


@pytest.mark.parametrize(("name", "where"), [("loose.png", "at the top"), ("a/deep/x.png", "nested below")])
def test_files_outside_class_folders_are_a_bad_layout(tmp_path: Path, name: str, where: str) -> None:
    members = [("a/1.png", png_bytes(_gray())), ("b/1.png", png_bytes(_gray())), (name, png_bytes(_gray()))]
    error = rejection(write_zip(tmp_path / "data.zip", members), FEW)
    assert error.reason == "bad-layout"
    assert name in error.detail and where in error.detail


def test_a_non_image_member_is_named(tmp_path: Path) -> None:
    members = [("a/1.png", png_bytes(_gray())), ("b/notes.png", b"just some text"), ("b/2.png", png_bytes(_gray()))]
    error = rejection(write_zip(tmp_path / "data.zip", members), FEW)
    assert error.reason == "undecodable-image"
    assert "b/notes.png" in error.detail


def test_a_truncated_png_is_undecodable(tmp_path: Path) -> None:
    broken = png_bytes(_gray(64))[:-60]
    path = write_zip(tmp_path / "data.zip", [("a/1.png", png_bytes(_gray())), ("b/1.png", broken)])
    assert rejection(path, FEW).reason == "undecodable-image"


def test_an_image_over_the_side_limit_is_refused(tmp_path: Path) -> None:
    x, y = digits_arrays()
    path = write_image_zip(tmp_path / "digits.zip", x[:20], y[:20] % 2)
    assert rejection(path, Limits(min_samples_per_class=1, max_image_side=4)).reason == "image-too-large"


def claim_size(png: bytes, width: int, height: int) -> bytes:
    """The PNG with its header claiming another size (and a valid header checksum)."""
    header = png[16:29]  # IHDR's data: width, height, depth, colour type...
    header = struct.pack(">II", width, height) + header[8:]
    return png[:16] + header + struct.pack(">I", zlib.crc32(b"IHDR" + header)) + png[33:]


@pytest.mark.parametrize("side", [5000, 60000])
def test_a_decompression_bomb_png_is_refused_before_decoding(tmp_path: Path, side: int) -> None:
    bomb = claim_size(png_bytes(_gray()), side, side)
    assert struct.unpack(">II", bomb[16:24]) == (side, side)
    members = [("a/1.png", png_bytes(_gray())), ("b/1.png", bomb)]
    error = rejection(write_zip(tmp_path / "data.zip", members), FEW)
    assert error.reason == "image-too-large"
    assert "b/1.png" in error.detail


def _mixed_sizes(tmp_path: Path) -> Path:
    members = [(f"a/{i}.png", png_bytes(_gray(8, i))) for i in range(3)]
    members += [(f"b/{i}.png", png_bytes(_gray(12, i))) for i in range(2)]
    members += [("b/odd.png", png_bytes(_gray(5)))]
    return write_zip(tmp_path / "data.zip", members)


def test_mixed_sizes_are_resized_to_the_median_size(tmp_path: Path) -> None:
    inspection = inspect_file(_mixed_sizes(tmp_path), "data.zip", FEW)  # 3 of 8x8, 2 of 12x12, one 5x5: median 8
    image = inspection.profile["image"]
    assert (image["height"], image["width"], image["channels"], image["resized"]) == (8, 8, 1, True)
    assert image["resize"] == {"policy": "centre-crop", "reason": "mixed-sizes", "max_native_side": MAX_NATIVE_SIDE,
                               "native_sizes": 3, "smallest": [5, 5], "largest": [12, 12], "most_common": [8, 8]}
    data = load_images(_mixed_sizes(tmp_path), "image_zip", FEW)
    assert data.x.shape == (6, 8, 8, 1)
    np.testing.assert_array_equal(data.x[:3], np.stack([_gray(8, i) for i in range(3)]))  # native size: untouched
    np.testing.assert_array_equal(data.x[3], fit_pixels(_gray(12, 0)[None], (8, 8))[0])


def test_large_images_are_scaled_down_to_the_cap_with_their_aspect(tmp_path: Path) -> None:
    big = [RNG.integers(0, 256, (100, 80, 3), dtype=np.uint8) for _ in range(4)]
    path = write_zip(tmp_path / "big.zip", [(f"{'ab'[i % 2]}/{i}.png", png_bytes(p)) for i, p in enumerate(big)])
    image = inspect_file(path, "big.zip", FEW).profile["image"]
    assert (image["height"], image["width"], image["channels"]) == (64, 51, 3)
    assert image["resize"]["reason"] == "too-large" and image["resized"] is True
    data = load_images(path, "image_zip", FEW)
    np.testing.assert_array_equal(data.x, fit_pixels(np.stack(big), (64, 51)))


def test_images_at_the_cap_keep_their_native_size(tmp_path: Path) -> None:
    side = [RNG.integers(0, 256, (MAX_NATIVE_SIDE, 20, 1), dtype=np.uint8) for _ in range(2)]
    path = write_zip(tmp_path / "d.zip", [("a/0.png", png_bytes(side[0])), ("b/0.png", png_bytes(side[1]))])
    image = inspect_file(path, "d.zip", FEW).profile["image"]
    assert (image["height"], image["width"], image["resized"]) == (MAX_NATIVE_SIDE, 20, False)
    assert image["resize"]["policy"] == "native"
    np.testing.assert_array_equal(load_images(path, "image_zip", FEW).x, np.stack(side))


def test_the_centre_is_kept_and_nothing_is_stretched() -> None:
    wide = np.zeros((1, 10, 30, 1), np.uint8)
    wide[:, :, 10:20] = 200  # the centre square; the sides are cropped away
    np.testing.assert_array_equal(fit_pixels(wide, (10, 10)), np.full((1, 10, 10, 1), 200, np.uint8))
    tall = np.zeros((1, 40, 20, 1), np.uint8)
    tall[:, 6:34] = 90  # the centre 20x20 (with the filter's reach around it) is kept, scaled 4x down
    np.testing.assert_array_equal(fit_pixels(tall, (5, 5)), np.full((1, 5, 5, 1), 90, np.uint8))
    assert fit_pixels(tall, (4, 16)).shape == (1, 4, 16, 1)  # upscaled to cover, then cropped


def test_float_images_are_resized_as_floats() -> None:
    x = np.linspace(0.0, 1.0, 2 * 12 * 12 * 3, dtype=np.float32).reshape(2, 12, 12, 3)
    out = fit_pixels(x, (6, 6))
    assert out.dtype == np.float32 and out.shape == (2, 6, 6, 3)
    np.testing.assert_allclose(out.mean(axis=(1, 2)), x.mean(axis=(1, 2)), atol=1e-3)


def test_a_declared_resize_brings_mixed_sizes_to_one(tmp_path: Path) -> None:
    limits = Limits(min_samples_per_class=1, resize=(6, 7))
    inspection = inspect_file(_mixed_sizes(tmp_path), "data.zip", limits)
    image = inspection.profile["image"]
    assert (image["height"], image["width"], image["channels"], image["resized"]) == (6, 7, 1, True)
    assert load_images(_mixed_sizes(tmp_path), "image_zip", limits).x.shape == (6, 6, 7, 1)


def test_gray_images_among_rgb_ones_become_rgb(tmp_path: Path) -> None:
    gray = _gray(seed=3)
    rgb = RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    rgba = np.concatenate([rgb, np.full((8, 8, 1), 9, np.uint8)], axis=-1)
    palette = Image.fromarray(rgb).quantize(16)
    members = [("a/gray.png", png_bytes(gray)), ("a/rgb.png", png_bytes(rgb)), ("b/rgba.png", png_bytes(rgba)),
               ("b/palette.png", png_bytes(np.asarray(palette.convert("RGB"))))]
    data = load_images(write_zip(tmp_path / "data.zip", members), "image_zip", FEW)
    assert data.x.shape == (4, 8, 8, 3)
    np.testing.assert_array_equal(data.x[0], np.repeat(gray, 3, axis=-1))
    np.testing.assert_array_equal(data.x[1], rgb)
    np.testing.assert_array_equal(data.x[2], rgb)  # alpha dropped
    np.testing.assert_array_equal(data.x[3], np.asarray(palette.convert("RGB")))
    image = inspect_file(tmp_path / "data.zip", "data.zip", FEW).profile["image"]
    expected = data.x.reshape(-1, 3).astype(np.float64)
    assert image["mean"] == pytest.approx(expected.mean(axis=0).tolist(), abs=1e-4)
    assert image["std"] == pytest.approx(expected.std(axis=0).tolist(), abs=1e-4)


def test_duplicate_images_are_counted_not_refused(tmp_path: Path) -> None:
    x, y = digits_arrays()
    x, y = x[:30], y[:30] % 3
    # samples 0..2 again under their own labels, sample 3 again under another label
    x = np.concatenate([x, x[:4]])
    y = np.concatenate([y, y[:3], [(y[3] + 1) % 3]])
    inspection = inspect_file(write_image_zip(tmp_path / "data.zip", x, y), "data.zip", FEW)
    assert inspection.profile["duplicates"] == {"count": 4, "conflicting": 1}
