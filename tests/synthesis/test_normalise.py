"""Per-channel normalisation statistics from the training images."""

from __future__ import annotations

import numpy as np
import pytest

from synthesis.normalise import channel_normalisation


def test_each_channel_is_standardised() -> None:
    rng = np.random.default_rng(0)
    x = np.stack([rng.normal(10, 2, (50, 6, 5)), rng.normal(200, 30, (50, 6, 5)), rng.normal(-3, 0.5, (50, 6, 5))],
                 axis=-1)
    scale, offset = channel_normalisation(x)
    assert len(scale) == len(offset) == 3
    z = x * np.asarray(scale) + np.asarray(offset)
    np.testing.assert_allclose(z.mean(axis=(0, 1, 2)), 0.0, atol=1e-9)
    np.testing.assert_allclose(z.std(axis=(0, 1, 2)), 1.0, rtol=1e-9)
    np.testing.assert_allclose(scale, 1 / x.std(axis=(0, 1, 2)), rtol=1e-9)
    np.testing.assert_allclose(offset, -x.mean(axis=(0, 1, 2)) / x.std(axis=(0, 1, 2)), rtol=1e-9)


def test_only_the_given_rows_count() -> None:
    x = np.zeros((4, 2, 2, 1), np.uint8)
    x[:2] = 10
    x[1, 0, 0, 0] = 30
    x[2:] = 255  # not training rows
    scale, offset = channel_normalisation(x, np.array([0, 1]))
    pixels = x[:2].astype(np.float64)
    assert scale == pytest.approx((1 / pixels.std(),)) and offset == pytest.approx((-pixels.mean() / pixels.std(),))


def test_a_constant_channel_keeps_scale_one() -> None:
    x = np.full((3, 4, 4, 3), 213, np.uint8)
    x[..., 1] = np.arange(16, dtype=np.uint8).reshape(4, 4)
    scale, offset = channel_normalisation(x)
    assert scale[0] == scale[2] == 1.0 and offset[0] == offset[2] == -213.0
    assert scale[1] == pytest.approx(1 / np.arange(16).std())


def test_uint8_images_in_many_blocks_match_the_float_statistics() -> None:
    x = np.random.default_rng(1).integers(0, 256, (9000, 3, 3, 1), dtype=np.uint8)
    scale, offset = channel_normalisation(x)
    pixels = x.astype(np.float64)
    assert scale[0] == pytest.approx(1 / pixels.std(), rel=1e-12)
    assert offset[0] == pytest.approx(-pixels.mean() / pixels.std(), rel=1e-12)


def test_no_rows_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one image"):
        channel_normalisation(np.zeros((2, 2, 2, 1)), np.array([], np.int64))
