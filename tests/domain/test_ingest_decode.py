"""decode_image: one uploaded image to the model's input shape, for predictions."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from domain.errors import DatasetRejected
from domain.ingest import Limits, decode_image
from tests.datasets import png_bytes

RNG = np.random.default_rng(3)


def test_a_gray_png_decodes_to_its_pixels() -> None:
    pixels = RNG.integers(0, 256, (8, 8, 1), dtype=np.uint8)
    out = decode_image(png_bytes(pixels), (8, 8, 1), Limits())
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, pixels)


def test_an_rgba_png_decodes_into_three_channels_without_alpha() -> None:
    rgba = RNG.integers(0, 256, (5, 6, 4), dtype=np.uint8)
    out = decode_image(png_bytes(rgba), (5, 6, 3), Limits())
    np.testing.assert_array_equal(out, rgba[..., :3])


def test_an_rgb_image_into_one_channel_is_its_luma() -> None:
    rgb = RNG.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    out = decode_image(png_bytes(rgb), (4, 4, 1), Limits())
    np.testing.assert_array_equal(out[..., 0], np.asarray(Image.fromarray(rgb).convert("L")))


def test_a_gray_image_into_three_channels_repeats_it() -> None:
    gray = RNG.integers(0, 256, (4, 4, 1), dtype=np.uint8)
    np.testing.assert_array_equal(decode_image(png_bytes(gray), (4, 4, 3), Limits()), np.repeat(gray, 3, axis=-1))


def test_another_size_is_resized() -> None:
    flat = np.full((20, 30, 3), 77, dtype=np.uint8)
    out = decode_image(png_bytes(flat, "JPEG"), (28, 28, 3), Limits())
    assert out.shape == (28, 28, 3)
    assert np.abs(out.astype(int) - 77).max() <= 2


def test_a_16_bit_png_keeps_its_high_byte() -> None:
    wide = (np.arange(16, dtype=np.uint16) * 4000).reshape(4, 4)
    buffer = io.BytesIO()
    Image.fromarray(wide).save(buffer, format="PNG")
    np.testing.assert_array_equal(decode_image(buffer.getvalue(), (4, 4, 1), Limits())[..., 0], wide >> 8)


@pytest.mark.parametrize("data", [b"", b"GIF89a....", b"\x89PNG\r\n\x1a\n" + bytes(30)])
def test_bytes_that_are_no_png_or_jpeg_are_undecodable(data: bytes) -> None:
    with pytest.raises(DatasetRejected) as caught:
        decode_image(data, (8, 8, 1), Limits())
    assert caught.value.reason == "undecodable-image"


def test_an_image_over_the_side_limit_is_refused() -> None:
    with pytest.raises(DatasetRejected) as caught:
        decode_image(png_bytes(np.zeros((10, 10, 1), np.uint8)), (8, 8, 1), Limits(max_image_side=9))
    assert caught.value.reason == "image-too-large"


def test_a_shape_without_one_or_three_channels_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="channels"):
        decode_image(png_bytes(np.zeros((8, 8, 1), np.uint8)), (8, 8, 2), Limits())
