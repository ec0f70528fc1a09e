"""PNG and JPEG bytes decoded to uint8 pixel arrays, with size checks before any pixel is decoded."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from domain.errors import DatasetRejected
from domain.ingest.limits import Limits
from domain.ingest.resize import CENTRE_CROP, Size, fit_image

IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")
_FORMATS = ("PNG", "JPEG")
_GRAY = {"1", "L", "LA"}
_GRAY16 = {"I", "I;16", "I;16B", "I;16L", "I;16N"}


def _undecodable(name: str, why: str) -> DatasetRejected:
    return DatasetRejected("undecodable-image", f"{name} is not a readable PNG or JPEG image ({why})")


def _header(data: bytes, name: str, limits: Limits) -> Image.Image:
    """The image opened (its header read, no pixel decoded yet); refused when its size passes the limit."""
    if not data.startswith(IMAGE_MAGIC):
        raise _undecodable(name, "its first bytes are not a PNG or JPEG signature")
    try:
        image = Image.open(io.BytesIO(data), formats=_FORMATS)
    except Image.DecompressionBombError as exc:
        raise DatasetRejected("image-too-large", f"{name} has too many pixels ({exc})") from exc
    except Exception as exc:  # Pillow raises many types on hostile input; all mean the same to the user
        raise _undecodable(name, str(exc) or type(exc).__name__) from exc
    width, height = image.size
    if max(width, height) > limits.max_image_side:
        raise DatasetRejected(
            "image-too-large", f"{name} is {height}x{width}; images may be at most {limits.max_image_side} per side")
    return image


def image_size(data: bytes, name: str, limits: Limits) -> Size:
    """The (height, width) of a PNG or JPEG, read from its header without decoding a pixel."""
    image = _header(data, name, limits)
    return image.height, image.width


def _open(data: bytes, name: str, limits: Limits) -> Image.Image:
    image = _header(data, name, limits)
    try:
        image.load()
    except Exception as exc:  # as above: truncated data, bad chunks, bad Huffman tables...
        raise _undecodable(name, str(exc) or type(exc).__name__) from exc
    return image


def _natural_channels(image: Image.Image) -> int:
    return 1 if image.mode in _GRAY or image.mode in _GRAY16 else 3


def _convert(image: Image.Image, channels: int) -> Image.Image:
    if image.mode in _GRAY16:
        wide = np.asarray(image).astype(np.int64)
        image = Image.fromarray((np.clip(wide, 0, 0xFFFF) >> 8).astype(np.uint8), mode="L")
    if channels == 1:
        return image.convert("L")
    if image.mode in {"P", "PA"}:
        image = image.convert("RGBA")  # a palette's transparency is resolved through RGBA, then dropped
    return image.convert("RGB")


def decode_pixels(
    data: bytes, name: str, limits: Limits, channels: int | None = None, size: Size | None = None,
    policy: str = CENTRE_CROP,
) -> tuple[np.ndarray, bool]:
    """Decode to uint8 [H, W, C] and whether it was resized: C from the image's mode unless `channels` is given
    (gray -> 1; RGB, RGBA without alpha, palette -> 3), brought to `size` (height, width) by the resize
    `policy` (domain.ingest.resize) when given."""
    image = _open(data, name, limits)
    image = _convert(image, channels or _natural_channels(image))
    resized = size is not None and (image.height, image.width) != size
    if size is not None and resized:
        image = fit_image(image, size, policy)
    pixels = np.asarray(image, dtype=np.uint8)
    return pixels.reshape(image.height, image.width, -1), resized


def decode_image(data: bytes, shape: tuple[int, int, int], limits: Limits, name: str = "the image",
                 policy: str = CENTRE_CROP) -> np.ndarray:
    """One PNG or JPEG as uint8 [H, W, C] of the given shape (C = 1 or 3), converted as needed and resized by
    the resize `policy`; a refusal calls it `name`."""
    height, width, channels = shape
    if channels not in (1, 3):
        raise ValueError(f"an image shape needs 1 or 3 channels, not {channels}")
    pixels, _ = decode_pixels(data, name, limits, channels=channels, size=(height, width), policy=policy)
    return pixels
