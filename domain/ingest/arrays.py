"""Image arrays read from an npz archive: safe zip structure, no pickles, shapes and dtypes checked first."""

from __future__ import annotations

import contextlib
import math
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domain.errors import DatasetRejected
from domain.ingest.archive import MemberReader, SafeZip
from domain.ingest.limits import Limits

_CHUNK = 1024 * 1024
_KEY_PAIRS = (("x", "y"), ("x_train", "y_train"))
Header = tuple[tuple[int, ...], bool, np.dtype]  # shape, Fortran order, dtype


@dataclass(frozen=True)
class NpzImages:
    """An npz's training images [N, H, W, C], their raw labels [N], and the size of its test split if any."""

    x: np.ndarray
    labels: np.ndarray
    test_samples: int | None


def _malformed(detail: str) -> DatasetRejected:
    return DatasetRejected("malformed-npz", detail)


def _read_header(member: MemberReader, key: str) -> Header:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(member)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except ValueError as exc:
        raise _malformed(f"array {key!r} is not a valid .npy array ({exc})") from exc
    if dtype.hasobject:
        raise _malformed(f"array {key!r} holds Python objects (pickles), which are not accepted")
    return tuple(int(n) for n in shape), bool(fortran), dtype


class _Npz:
    """The .npy members of a checked archive, by key."""

    def __init__(self, archive: SafeZip) -> None:
        self.archive = archive
        self.members: dict[str, zipfile.ZipInfo] = {
            info.filename.removesuffix(".npy"): info for info in archive.members if info.filename.endswith(".npy")}

    def header(self, key: str) -> Header:
        with self.archive.open(self.members[key]) as member:
            return _read_header(member, key)

    def read(self, key: str, check: Callable[[Header], None]) -> np.ndarray:
        """The whole array, its header checked first."""
        with self.archive.open(self.members[key]) as member:
            shape, fortran, dtype = _checked_header(member, key, check)
            flat = _read_bytes(member, math.prod(shape), dtype)
        return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)

    def batches(self, key: str, check: Callable[[Header], None], rows: int) -> Iterator[np.ndarray]:
        """The array `rows` first-axis rows at a time (a Fortran-ordered one whole), its header checked first."""
        with self.archive.open(self.members[key]) as member:
            shape, fortran, dtype = _checked_header(member, key, check)
            if fortran:
                flat = _read_bytes(member, math.prod(shape), dtype)
                yield flat.reshape(shape[::-1]).T
                return
            per_row = math.prod(shape[1:])
            for start in range(0, shape[0], rows):
                n = min(rows, shape[0] - start)
                yield _read_bytes(member, n * per_row, dtype).reshape((n, *shape[1:]))


def _checked_header(member: MemberReader, key: str, check: Callable[[Header], None]) -> Header:
    """The member's header, checked by `check` and against the bytes the member holds."""
    header = _read_header(member, key)
    check(header)
    shape, _, dtype = header
    size = math.prod(shape) * dtype.itemsize
    if size != member.remaining:
        raise _malformed(f"array {key!r} declares more data than the archive holds" if size > member.remaining
                         else f"array {key!r} holds more data than its shape")
    return header


def _read_bytes(member: MemberReader, count: int, dtype: np.dtype) -> np.ndarray:
    """The member's next `count` values (the member reader refuses a short member)."""
    flat = np.empty(count, dtype=dtype)
    raw = flat.view(np.uint8)
    for start in range(0, raw.shape[0], _CHUNK):
        size = min(_CHUNK, raw.shape[0] - start)
        raw[start : start + size] = np.frombuffer(member.read(size), dtype=np.uint8)
    return flat


def _check_x(key: str, limits: Limits) -> Callable[[Header], None]:
    def check(header: Header) -> None:
        shape, _, dtype = header
        if dtype != np.uint8 and dtype.kind != "f":
            raise _malformed(f"{key!r} must hold uint8 or floating-point pixels, not {dtype}")
        if len(shape) not in (3, 4) or (len(shape) == 4 and shape[3] not in (1, 3)):
            raise _malformed(f"{key!r} must have shape [N, H, W] or [N, H, W, C] with C 1 or 3, not {list(shape)}")
        if shape[0] == 0:
            raise DatasetRejected("empty", f"{key!r} holds no samples")
        if max(shape[1:3]) > limits.max_image_side:
            raise DatasetRejected("image-too-large", f"{key!r} images are {shape[1]}x{shape[2]}; at most "
                                  f"{limits.max_image_side} per side")
    return check


def _check_y(key: str, samples: int) -> Callable[[Header], None]:
    def check(header: Header) -> None:
        shape, _, dtype = header
        if dtype.kind not in "iuUS" or len(shape) != 1:
            raise _malformed(f"{key!r} must be a 1-D array of integer or string labels, not {dtype} {list(shape)}")
        if shape[0] != samples:
            raise _malformed(f"{key!r} has {shape[0]} labels for {samples} samples")
    return check


def _test_samples(npz: _Npz, x_shape: tuple[int, ...]) -> int | None:
    if "x_test" not in npz.members and "y_test" not in npz.members:
        return None
    if "x_test" not in npz.members or "y_test" not in npz.members:
        raise _malformed("a test split needs both 'x_test' and 'y_test'")
    shape, _, _ = npz.header("x_test")
    if shape[1:] != x_shape[1:]:
        raise _malformed(f"'x_test' images have shape {list(shape[1:])}, 'x_train' images {list(x_shape[1:])}")
    _check_y("y_test", shape[0])(npz.header("y_test"))
    return shape[0]


def _pixels(x: np.ndarray, key: str) -> np.ndarray:
    """Images as kept: finite float32 (NaN and infinities refused) or uint8, with a channel axis."""
    x = _finite_float32(x, key) if x.dtype.kind == "f" else x.astype(np.uint8, copy=False)
    return x if x.ndim == 4 else x[..., np.newaxis]


def _finite_float32(x: np.ndarray, key: str) -> np.ndarray:
    out = np.empty(x.shape, dtype=np.float32)
    for start in range(0, x.shape[0], 1024):
        block = x[start : start + 1024]
        if not np.isfinite(block).all():
            raise _malformed(f"{key!r} holds NaN or infinite values")
        out[start : start + 1024] = block
    return out


def label_names(labels: np.ndarray) -> list[str]:
    """Each sample's label as a class name: integers in decimal, byte strings decoded as UTF-8."""
    values, inverse = np.unique(labels, return_inverse=True)
    try:
        names = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values.tolist()]
    except UnicodeDecodeError as exc:
        raise _malformed(f"a byte-string label is not valid UTF-8 ({exc})") from exc
    return [names[i] for i in inverse.tolist()]


def _keys(npz: _Npz, pairs: tuple[tuple[str, str], ...], labelled: bool, wanted: str) -> tuple[str, str]:
    keys = next(((x, y) for x, y in pairs if x in npz.members and (y in npz.members or not labelled)), None)
    if keys is None:
        found = ", ".join(sorted(npz.members)) or "none"
        raise _malformed(f"the npz needs {wanted}; found: {found}")
    return keys


def _read(
    path: Path, limits: Limits, pairs: tuple[tuple[str, str], ...], labelled: bool, wanted: str,
) -> tuple[np.ndarray, np.ndarray | None, int | None]:
    """The images [N, H, W, C] under the first pair's x key present, their labels (None when not `labelled`
    and absent) and the size of an x_test split; the npz is refused as not holding `wanted` without them."""
    with SafeZip(path, limits) as archive:
        npz = _Npz(archive)
        x_key, y_key = _keys(npz, pairs, labelled, wanted)
        x = npz.read(x_key, _check_x(x_key, limits))
        labels = npz.read(y_key, _check_y(y_key, x.shape[0])) if y_key in npz.members else None
        test = _test_samples(npz, x.shape) if x_key == "x_train" else None
    return _pixels(x, x_key), labels, test


@contextlib.contextmanager
def npz_batches(path: Path, limits: Limits, rows: int = 1024) -> Iterator[tuple[NpzImages, Iterator[np.ndarray]]]:
    """Images and labels as `read_npz` checks them, with the images streamed: an NpzImages whose `x` is empty
    (zero rows, the images' shape otherwise) and the images `rows` at a time, so that inspecting an upload never
    holds all of it in memory."""
    with SafeZip(path, limits) as archive:
        npz = _Npz(archive)
        x_key, y_key = _keys(npz, _KEY_PAIRS, True, "arrays 'x' and 'y' (or 'x_train' and 'y_train')")
        shape, _, dtype = npz.header(x_key)
        _check_x(x_key, limits)((shape, False, dtype))
        labels = npz.read(y_key, _check_y(y_key, shape[0]))
        test = _test_samples(npz, shape) if x_key == "x_train" else None
        empty = _pixels(np.zeros((0, *shape[1:]), dtype), x_key)
        yield NpzImages(empty, labels, test), (_pixels(b, x_key) for b in npz.batches(x_key, _check_x(x_key, limits),
                                                                                     rows))


def read_npz(path: Path, limits: Limits) -> NpzImages:
    """The images and labels under keys x/y or x_train/y_train (then x_test/y_test only counted)."""
    x, labels, test = _read(path, limits, _KEY_PAIRS, True, "arrays 'x' and 'y' (or 'x_train' and 'y_train')")
    assert labels is not None  # a labelled read refuses an npz without them
    return NpzImages(x, labels, test)


def read_npz_inputs(path: Path, limits: Limits) -> tuple[np.ndarray, np.ndarray | None]:
    """Images to predict on under key x, [N, H, W, C] uint8 (float32 when the npz holds floats), and their
    raw labels under key y when the npz has them."""
    x, labels, _ = _read(path, limits, (("x", "y"),), False, "an array 'x' of images (and optionally 'y' of labels)")
    return x, labels
