"""Builders of small dataset files (image zips, CSV, TSV, npz) for tests that upload or ingest data,
and helpers that inspect or load them."""

from __future__ import annotations

import csv
import io
import struct
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from domain.errors import DatasetRejected
from domain.ingest import ImageData, Limits, TextData, inspect_file, load_file


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as uint8 images [1797, 8, 8, 1] scaled from 0..16 to 0..255, and int64 labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = np.round(digits.images * 255 / 16).astype(np.uint8)[..., np.newaxis]
    return x, digits.target.astype(np.int64)


def png_bytes(pixels: np.ndarray, fmt: str = "PNG") -> bytes:
    """One image [H, W, C] (C = 1, 3 or 4) or [H, W] encoded as PNG (or another Pillow format, e.g. JPEG)."""
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[..., 0]
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8)).save(buffer, format=fmt)
    return buffer.getvalue()


def write_image_zip(
    path: Path, x: np.ndarray, y: np.ndarray, classes: Sequence[str] | None = None, root: str | None = None,
    fmt: str = "PNG",
) -> Path:
    """A zip with one image per sample under a folder named after its class (classes[y], else str(y)),
    all under the folder `root` when given."""
    prefix = f"{root}/" if root else ""
    suffix = ".png" if fmt == "PNG" else ".jpg"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for i, (pixels, label) in enumerate(zip(x, y, strict=True)):
            name = classes[int(label)] if classes is not None else str(int(label))
            archive.writestr(f"{prefix}{name}/{i}{suffix}", png_bytes(pixels, fmt))
    return path


def write_text_csv(path: Path, texts: Sequence[str], labels: Sequence[str]) -> Path:
    """A UTF-8 CSV with a `text,label` header and one quoted-as-needed row per sample."""
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(zip(texts, labels, strict=True))
    return path


def write_text_tsv(path: Path, texts: Sequence[str], labels: Sequence[str]) -> Path:
    """A NeuNetS-style TSV: `text<TAB>label` per line, no header."""
    with path.open("w", encoding="utf-8", newline="") as f:
        f.writelines(f"{text}\t{label}\n" for text, label in zip(texts, labels, strict=True))
    return path


def write_npz(path: Path, **arrays: np.ndarray) -> Path:
    """An uncompressed npz holding the given arrays under their keyword names."""
    with path.open("wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]
    return path


def write_zip(
    path: Path, members: Iterable[tuple[str | zipfile.ZipInfo, bytes]], compression: int = zipfile.ZIP_DEFLATED,
) -> Path:
    """A zip of the given (name or ZipInfo, bytes) members, in order; for archives no builder above makes."""
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return path


def patch_zip_header(path: Path, field: str, value: int) -> Path:
    """Overwrite a field ("flags" or "file_size") of the first member's local and central headers, in place:
    an archive that lies about its member (e.g. a smaller size than the member really yields)."""
    local_at, central_at, fmt = {"flags": (6, 8, "<H"), "file_size": (22, 24, "<L")}[field]
    with zipfile.ZipFile(path) as archive:
        local = archive.infolist()[0].header_offset
    data = bytearray(path.read_bytes())
    (central,) = struct.unpack_from("<L", data, data.rfind(b"PK\x05\x06") + 16)  # the central directory's offset
    struct.pack_into(fmt, data, local + local_at, value)
    struct.pack_into(fmt, data, central + central_at, value)
    path.write_bytes(bytes(data))
    return path


def rejection(path: Path, limits: Limits, filename: str | None = None) -> DatasetRejected:
    """The refusal inspect_file raises for the file uploaded as `filename` (default: its own name)."""
    with pytest.raises(DatasetRejected) as caught:
        inspect_file(path, filename or path.name, limits)
    assert caught.value.detail, "a refusal always says why"
    return caught.value


def load_images(path: Path, fmt: str, limits: Limits) -> ImageData:
    """load_file's result for an image dataset."""
    data = load_file(path, fmt, limits)
    assert isinstance(data, ImageData)
    return data


def load_texts(path: Path, fmt: str, limits: Limits) -> TextData:
    """load_file's result for a text dataset."""
    data = load_file(path, fmt, limits)
    assert isinstance(data, TextData)
    return data
