"""The image resize policy: which size a dataset's images are brought to, and how one image gets there.

Images keep their native size when they all share one size whose longer side is at most
:data:`MAX_NATIVE_SIDE` pixels. Otherwise (mixed sizes, or larger images) every image is resized to one
target: the median height and the median width over the images, scaled down (aspect kept) until the longer
side is at most :data:`MAX_NATIVE_SIDE`; a size declared at upload (`resize=HxW`) replaces that target.
An image is resized by :data:`CENTRE_CROP`: scaled (bilinear, antialiased when shrinking) to the smallest
size that covers the target with its aspect ratio kept, then the centre cut out, so nothing is stretched and
no artificial border appears. Prediction brings raw inputs of any size to the model's size the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

MAX_NATIVE_SIDE = 64
"""Longest image side (px) trained at native resolution; larger images are scaled down to it."""
CENTRE_CROP, STRETCH = "centre-crop", "stretch"
POLICIES = (CENTRE_CROP, STRETCH)
"""How an image is brought to another size: `centre-crop` (aspect kept, see above); `stretch` (each axis scaled
on its own) is what model packages made before the policy existed ask for."""

Size = tuple[int, int]  # (height, width)


@dataclass(frozen=True)
class ResizePlan:
    """The size a dataset's images are brought to (None: each keeps its native size), why, and its native sizes."""

    target: Size | None
    reason: str  # "native" | "declared" | "mixed-sizes" | "too-large"
    native: Counter[Size]

    def profile(self) -> dict[str, Any]:
        """The plan as the dataset profile records it."""
        by_area = sorted(self.native, key=lambda s: (s[0] * s[1], s))
        part: dict[str, Any] = {"policy": CENTRE_CROP if self.target else "native", "reason": self.reason,
                                "max_native_side": MAX_NATIVE_SIDE, "native_sizes": len(self.native)}
        if by_area:
            part.update(smallest=list(by_area[0]), largest=list(by_area[-1]),
                        most_common=list(self.native.most_common(1)[0][0]))
        return part


def capped(size: Size, side: int = MAX_NATIVE_SIDE) -> Size:
    """`size` scaled down, aspect kept, so that its longer side is at most `side` (each side at least 1)."""
    height, width = size
    if max(height, width) <= side:
        return size
    factor = side / max(height, width)
    return max(1, round(height * factor)), max(1, round(width * factor))


def plan_resize(native: Counter[Size], declared: Size | None = None) -> ResizePlan:
    """The resize plan of images whose native (height, width) sizes are counted in `native`."""
    if declared is not None:
        return ResizePlan(declared, "declared", native)
    if len(native) <= 1:
        size = next(iter(native), (0, 0))
        return ResizePlan(None, "native", native) if max(size) <= MAX_NATIVE_SIDE else ResizePlan(
            capped(size), "too-large", native)
    counts = list(native.values())
    median_h = np.median(np.repeat([h for h, _ in native], counts))
    median_w = np.median(np.repeat([w for _, w in native], counts))
    return ResizePlan(capped((int(median_h + 0.5), int(median_w + 0.5))), "mixed-sizes", native)


def crop_box(source: Size, target: Size) -> tuple[float, float, float, float]:
    """The (left, upper, right, lower) region of a `source` image that, scaled to `target`, covers it with the
    aspect ratio kept: the centre of the source, as large as that aspect allows."""
    height, width = source
    factor = max(target[0] / height, target[1] / width)
    keep_h, keep_w = target[0] / factor, target[1] / factor
    top, left = (height - keep_h) / 2, (width - keep_w) / 2
    return left, top, left + keep_w, top + keep_h


def fit_image(image: Image.Image, size: Size, policy: str = CENTRE_CROP) -> Image.Image:
    """`image` brought to `size` (height, width) by `policy`; unchanged when it already has that size."""
    if (image.height, image.width) == size:
        return image
    if policy not in POLICIES:
        raise ValueError(f"a resize policy is one of {POLICIES}, not {policy!r}")
    box = crop_box((image.height, image.width), size) if policy == CENTRE_CROP else None
    return image.resize((size[1], size[0]), Image.Resampling.BILINEAR, box=box)


def fit_pixels(images: np.ndarray, size: Size, policy: str = CENTRE_CROP) -> np.ndarray:
    """Images [N, H, W, C] (uint8, or floats resized as float32) brought to `size` by `policy`, as
    :func:`fit_image` brings decoded images there."""
    if images.shape[1:3] == size:
        return images
    uint8 = images.dtype == np.uint8
    out = np.empty((images.shape[0], *size, images.shape[3]), np.uint8 if uint8 else np.float32)
    for i, pixels in enumerate(images):
        if uint8:
            fitted = fit_image(Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels), size, policy)
            out[i] = np.asarray(fitted, np.uint8).reshape(*size, -1)
        else:
            for c in range(pixels.shape[-1]):
                plane = Image.fromarray(np.ascontiguousarray(pixels[..., c], np.float32))  # mode F
                out[i, ..., c] = np.asarray(fit_image(plane, size, policy), np.float32)
    return out


def fit_strips(strips: Iterable[np.ndarray], source: Size, size: Size, policy: str = CENTRE_CROP) -> np.ndarray:
    """One image [H, W, C] (uint8, or float32), given as consecutive strips of its rows [k, W, C], brought to
    `size` as :func:`fit_pixels` brings the whole image there, pixel for pixel, without holding it: Pillow resizes
    in two passes, each row across then each column down, so every strip is resized across on its own, and the
    narrow result (H rows of the target's width) is then resized down. Holds one strip and H x width pixels."""
    height, width = source
    left, top, right, bottom = (crop_box(source, size) if policy == CENTRE_CROP
                                else (0.0, 0.0, float(width), float(height)))
    if policy not in POLICIES:
        raise ValueError(f"a resize policy is one of {POLICIES}, not {policy!r}")
    across: np.ndarray | None = None
    at = 0
    for strip in strips:
        rows, channels = strip.shape[0], strip.shape[-1]
        if across is None:
            across = np.empty((height, size[1], channels), np.uint8 if strip.dtype == np.uint8 else np.float32)
        for c, plane in _planes(strip):
            narrow = plane.resize((size[1], rows), Image.Resampling.BILINEAR, box=(left, 0, right, rows))
            _put(across, slice(at, at + rows), c, narrow)
        at += rows
    if across is None or at != height:
        raise ValueError(f"strips of {at} rows for an image of {height}")
    out = np.empty((*size, across.shape[-1]), across.dtype)
    for c, plane in _planes(across):
        down = plane.resize((size[1], size[0]), Image.Resampling.BILINEAR, box=(0, top, size[1], bottom))
        _put(out, slice(None), c, down)
    return out


def _put(out: np.ndarray, rows: slice, channel: slice | int, image: Image.Image) -> None:
    target = out[rows, :, channel]
    target[...] = np.asarray(image).reshape(target.shape)


def _planes(pixels: np.ndarray) -> Iterator[tuple[slice | int, Image.Image]]:
    """The Pillow images `fit_pixels` resizes for pixels [k, W, C]: one L or RGB image of uint8, one F image a
    channel of floats; each with the channels of the output it fills."""
    if pixels.dtype == np.uint8:
        yield slice(None), Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
        return
    for c in range(pixels.shape[-1]):
        yield c, Image.fromarray(np.ascontiguousarray(pixels[..., c], np.float32))
