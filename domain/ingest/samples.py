"""A few samples of a stored dataset to look at: the first rows of each class with their labels, and one image as the
model sees it, read from the dataset's validated file (a local file, or a blob store's seekable ranged reader) as
it streams: never the whole dataset at once, and for one image only the bytes of that image where the file
allows (an image zip's member; an npz row stored uncompressed) beside the archive's directory.

A sample's index is its row in the upload, as the explainability reports number rows: an npz's row, a text's
position among the texts, and for an archive of images the position of its path among the images' paths sorted.
"""

from __future__ import annotations

import io
from collections.abc import Generator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image

from domain.errors import DatasetRejected
from domain.ingest.archive import SafeZip
from domain.ingest.arrays import label_names, npz_stream
from domain.ingest.detect import TEXT_FORMATS
from domain.ingest.imagezip import class_members, member_pixels
from domain.ingest.limits import Limits
from domain.ingest.resize import capped
from domain.ingest.tables import text_rows
from domain.ingest.zipdir import Member

THUMBNAIL_SIDE = 128
"""The longest side of an image sample's PNG: larger images are scaled down to it (aspect kept), smaller ones kept."""
TEXT_CHARS = 1000
"""Most characters of a text sample that are shown."""
STORED = Limits(max_upload_bytes=2**62, min_samples_per_class=1, max_classes=2**31 - 1, max_image_file_bytes=2**62)
"""Bounds for reading a dataset that passed validation at upload: whatever the class settings say now; an image is
still decoded only within the per-image pixel limit (what one decode holds), a file's size no longer matters."""


@dataclass(frozen=True)
class Sample:
    """One row to show: its index (its row in the upload), its label, and its text (the first TEXT_CHARS) when
    the dataset holds texts."""

    index: int
    label: str
    text: str | None = None


def quotas(classes: Sequence[str], counts: Mapping[str, int], limit: int) -> dict[str, int]:
    """How many samples of each class to show: one of each class in turn, in `classes`' order, until `limit` are
    chosen or every class's `counts` are used up."""
    chosen, total, grown = dict.fromkeys(classes, 0), 0, True
    while total < limit and grown:
        grown = False
        for name in classes:
            if chosen[name] < counts.get(name, 0) and total < limit:
                chosen[name] += 1
                total += 1
                grown = True
    return chosen


def _members_by_row(archive: SafeZip) -> list[tuple[Member, str]]:
    """An archive's images with their classes, in the order of their rows: their paths sorted."""
    return sorted(class_members(archive, STORED), key=lambda member: member[0].filename)


Source = Path | BinaryIO


def _rows(path: Source, fmt: str) -> Generator[tuple[str, str | None], None, None]:
    """Each row's label and (for a text dataset) text, in row order; no pixel is read."""
    if fmt in TEXT_FORMATS:
        yield from ((label, text) for text, label in text_rows(path, fmt, STORED))
    elif fmt == "image_zip":
        with SafeZip(path, STORED) as archive:
            yield from ((label, None) for _, label in _members_by_row(archive))
    elif fmt == "npz":
        with npz_stream(path, STORED) as npz:
            for labels in npz.labels():
                yield from ((label, None) for label in label_names(labels))
    else:
        raise DatasetRejected("unknown-format", f"unknown dataset format {fmt!r}")


def pick_samples(path: Source, fmt: str, classes: Sequence[str], counts: Mapping[str, int], limit: int) -> list[Sample]:
    """Up to `limit` samples spread over `classes` (`quotas`): the first rows of each class, one class after the
    other in turn; the file is read only as far as the last row chosen."""
    wanted = quotas(classes, counts, limit)
    chosen: dict[str, list[Sample]] = {name: [] for name in classes}
    left = sum(wanted.values())
    with closing(_rows(path, fmt)) as rows:
        for index, (label, text) in enumerate(rows if left else ()):
            if len(chosen.get(label, ())) < wanted.get(label, 0):
                chosen[label].append(Sample(index, label, None if text is None else text[:TEXT_CHARS]))
                left -= 1
                if left == 0:
                    break
    return [chosen[name][turn] for turn in range(max(wanted.values(), default=0)) for name in classes
            if turn < len(chosen[name])]


def sample_pixels(path: Source, fmt: str, index: int, shape: tuple[int, int, int]) -> np.ndarray | None:
    """Row `index` of an image dataset as the model sees it: [H, W, C] at the dataset's `shape` (its profile's
    height, width and channels), brought there by the resize policy; None when there is no such row. Reads the
    archive's directory and that row's image, and for a compressed npz the rows before it (streamed, not held)."""
    height, width, channels = shape
    if fmt == "image_zip":
        with SafeZip(path, STORED) as archive:
            members = _members_by_row(archive)
            if index >= len(members):
                return None
            pixels, _ = member_pixels(archive, members[index][0], STORED, channels, (height, width))
            return pixels
    if fmt != "npz":
        raise DatasetRejected("unknown-format", f"a {fmt!r} dataset holds no images")
    with npz_stream(path, STORED) as npz:
        return npz.row(index, (height, width))


def thumbnail_png(pixels: np.ndarray, side: int = THUMBNAIL_SIDE) -> bytes:
    """Pixels [H, W, C] (C 1 or 3; uint8, or floats stretched from their smallest to their largest value) as a PNG
    at most `side` pixels a side."""
    if pixels.dtype != np.uint8:
        low, high = float(pixels.min()), float(pixels.max())
        scaled = (pixels - low) / (high - low) if high > low else np.zeros_like(pixels)
        pixels = np.round(scaled * 255).astype(np.uint8)
    image = Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
    height, width = capped((image.height, image.width), side)
    if (height, width) != (image.height, image.width):
        image = image.resize((width, height), Image.Resampling.BILINEAR, reducing_gap=2.0)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()
