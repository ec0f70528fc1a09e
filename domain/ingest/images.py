"""PNG and JPEG bytes decoded to uint8 pixel arrays, with size checks before any pixel is decoded."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
from PIL import Image

from domain.errors import DatasetRejected
from domain.ingest.limits import Limits
from domain.ingest.resize import CENTRE_CROP, Size, fit_strips

IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")
_FORMATS = ("PNG", "JPEG")
_GRAY = {"1", "L", "LA"}
_GRAY16 = {"I", "I;16", "I;16B", "I;16L", "I;16N"}
FILE_BYTES_PER_PIXEL = 8
"""The most bytes of an image file a pixel accounts for (16-bit RGBA stored uncompressed); with METADATA_BYTES,
what an image file may hold for its size: a file holding more carries data the image does not use."""
METADATA_BYTES = 1024 * 1024
Source = bytes | BinaryIO
BAND_BYTES = 1024 * 1024
"""About the bytes of the band of rows a resized image is converted and resized across at a time."""


def _undecodable(name: str, why: str) -> DatasetRejected:
    return DatasetRejected("undecodable-image", f"{name} is not a readable PNG or JPEG image ({why})")


def _header(data: Source, name: str, limits: Limits) -> Image.Image:
    """The image opened from its bytes or a seekable reader (its header read, no pixel decoded yet); refused when
    its size passes the limits."""
    if isinstance(data, bytes):
        data = io.BytesIO(data)
    head = data.read(len(IMAGE_MAGIC[0]))
    data.seek(0)
    if not head.startswith(IMAGE_MAGIC):
        raise _undecodable(name, "its first bytes are not a PNG or JPEG signature")
    try:
        image = Image.open(data, formats=_FORMATS)
    except Image.DecompressionBombError as exc:
        raise DatasetRejected("image-too-large", f"{name} has too many pixels ({exc})") from exc
    except Exception as exc:  # Pillow raises many types on hostile input; all mean the same to the user
        raise _undecodable(name, str(exc) or type(exc).__name__) from exc
    width, height = image.size
    if max(width, height) > limits.max_image_side:
        raise DatasetRejected(
            "image-too-large", f"{name} is {height}x{width}; images may be at most {limits.max_image_side} per side")
    if width * height > limits.max_image_pixels:
        raise DatasetRejected("image-too-large", f"{name} is {height}x{width}: {width * height} pixels; images may "
                              f"have at most {limits.max_image_pixels}")
    return image


def image_size(data: Source, name: str, limits: Limits) -> Size:
    """The (height, width) of a PNG or JPEG, read from its header without decoding a pixel."""
    image = _header(data, name, limits)
    return image.height, image.width


def check_file_size(size: int, name: str, limits: Limits, pixels: Size | None = None) -> None:
    """Refuse an image file of `size` bytes over the per-image file limit or, once its (height, width) `pixels`
    are known, over what an image of that size needs: data after the image's end (or hidden inside it) counts."""
    if size > limits.max_image_file_bytes:
        raise DatasetRejected("image-too-large", f"{name} has {size} bytes; an image file may have at most "
                              f"{limits.max_image_file_bytes}")
    if pixels is not None and size > (most := pixels[0] * pixels[1] * FILE_BYTES_PER_PIXEL + METADATA_BYTES):
        raise DatasetRejected("image-too-large", f"{name} has {size} bytes for a {pixels[0]}x{pixels[1]} image, "
                              f"whose pixels and metadata need at most {most}: data after the image's end counts "
                              "against its limits; save the image again without it")


def _open(data: Source, name: str, limits: Limits) -> Image.Image:
    image = _header(data, name, limits)
    try:
        image.load()
    except Exception as exc:  # as above: truncated data, bad chunks, bad Huffman tables...
        raise _undecodable(name, str(exc) or type(exc).__name__) from exc
    return image


def _natural_channels(image: Image.Image) -> int:
    return 1 if image.mode in _GRAY or image.mode in _GRAY16 else 3


def _convert(image: Image.Image, channels: int) -> Image.Image:
    """The image as L (`channels` 1) or RGB, pixel by pixel (so any band of its rows converts alone)."""
    if image.mode in _GRAY16:
        image = _gray16_to_l(image)
    target = "L" if channels == 1 else "RGB"
    if image.mode == target:
        return image
    if target == "RGB" and image.mode in {"P", "PA"}:
        image = image.convert("RGBA")  # a palette's transparency is resolved through RGBA, then dropped
    return image.convert(target)


def _gray16_to_l(image: Image.Image) -> Image.Image:
    """A 16- or 32-bit gray image as 8-bit L (its high byte), converted a band of rows at a time."""
    out = np.empty((image.height, image.width), dtype=np.uint8)
    for top, bottom in _bands(image):
        wide = np.asarray(image.crop((0, top, image.width, bottom)))
        out[top:bottom] = (np.clip(wide, 0, 0xFFFF) >> 8).astype(np.uint8)
    return Image.fromarray(out, mode="L")


def _bands(image: Image.Image) -> Iterator[tuple[int, int]]:
    """(top, bottom) of consecutive bands of the image's rows, each of about BAND_BYTES."""
    step = max(1, BAND_BYTES // max(4 * image.width, 1))
    for top in range(0, image.height, step):
        yield top, min(top + step, image.height)


def decode_pixels(
    data: Source, name: str, limits: Limits, channels: int | None = None, size: Size | None = None,
    policy: str = CENTRE_CROP,
) -> tuple[np.ndarray, bool]:
    """Decode (from its bytes or a seekable reader) to uint8 [H, W, C] and whether it was resized: C from the
    image's mode unless `channels` is given (gray -> 1; RGB, RGBA without alpha, palette -> 3), brought to `size`
    (height, width) by the resize `policy` (domain.ingest.resize) when given. Beside the decoded image, only a
    band of its rows is held at once when it is resized."""
    image = _open(data, name, limits)
    channels = channels or _natural_channels(image)
    native = (image.height, image.width)
    if size is None or native == size:
        pixels = np.asarray(_convert(image, channels), dtype=np.uint8)
        return pixels.reshape(*native, -1), False
    bands = (np.asarray(_convert(image.crop((0, top, image.width, bottom)), channels), dtype=np.uint8).reshape(
        bottom - top, image.width, -1) for top, bottom in _bands(image))
    return fit_strips(bands, native, size, policy), True


def decode_image(data: bytes, shape: tuple[int, int, int], limits: Limits, name: str = "the image",
                 policy: str = CENTRE_CROP) -> np.ndarray:
    """One PNG or JPEG as uint8 [H, W, C] of the given shape (C = 1 or 3), converted as needed and resized by
    the resize `policy`; a refusal calls it `name`."""
    height, width, channels = shape
    if channels not in (1, 3):
        raise ValueError(f"an image shape needs 1 or 3 channels, not {channels}")
    pixels, _ = decode_pixels(data, name, limits, channels=channels, size=(height, width), policy=policy)
    return pixels
