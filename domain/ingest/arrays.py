"""Image arrays read from an npz archive: safe zip structure, no pickles, shapes and dtypes checked first.

Inspecting an upload (`npz_stream`) reads it a few MiB at a time, whatever the size of its rows: rows are read
in batches of at most BATCH_BYTES, a row larger than that in strips of its lines, each brought to the dataset's
size as it comes (`domain.ingest.resize.fit_strips`); labels are read beside the rows they label. Loading for
training (`read_npz`) reads the arrays whole, as training needs them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from domain.errors import DatasetRejected
from domain.ingest.archive import MemberReader, SafeZip
from domain.ingest.limits import Limits
from domain.ingest.resize import Size, fit_pixels, fit_strips
from domain.ingest.zipdir import Member

BATCH_BYTES = 4 * 1024 * 1024
"""The most bytes of rows (as read, as converted and as resized, together) that inspecting an npz holds at once."""
_CHUNK = 1024 * 1024
_KEY_PAIRS = (("x", "y"), ("x_train", "y_train"))
_MAX_LABEL_BYTES = 4096  # one label's bytes in a 'U' or 'S' array
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
        self.members: dict[str, Member] = {
            info.filename.removesuffix(".npy"): info for info in archive.members if info.filename.endswith(".npy")}

    def header(self, key: str) -> Header:
        with self.archive.open(self.members[key]) as member:
            return _read_header(member, key)

    @contextlib.contextmanager
    def data(self, key: str, check: Callable[[Header], None]) -> Iterator[tuple[Header, MemberReader]]:
        """The array's header, checked, and a reader of its values from the first."""
        with self.archive.open(self.members[key]) as member:
            yield _checked_header(member, key, check), member

    def read(self, key: str, check: Callable[[Header], None]) -> np.ndarray:
        """The whole array, its header checked first."""
        with self.data(key, check) as ((shape, fortran, dtype), member):
            flat = _read_values(member, math.prod(shape), dtype)
        return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)


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


def _read_values(member: MemberReader, count: int, dtype: np.dtype) -> np.ndarray:
    """The member's next `count` values (the member reader refuses a short member)."""
    flat = np.empty(count, dtype=dtype)
    raw = flat.view(np.uint8)
    for start in range(0, raw.shape[0], _CHUNK):
        size = min(_CHUNK, raw.shape[0] - start)
        raw[start : start + size] = np.frombuffer(member.read(size), dtype=np.uint8)
    return flat


def _check_x(key: str, limits: Limits, streamed: bool = False) -> Callable[[Header], None]:
    """Refuse an image array of the wrong dtype or shape, or whose images pass the per-image limits, from its
    header alone; `streamed` (inspecting) also refuses a Fortran-ordered one, which cannot be read a row at a time."""
    def check(header: Header) -> None:
        shape, fortran, dtype = header
        if dtype != np.uint8 and dtype.kind != "f":
            raise _malformed(f"{key!r} must hold uint8 or floating-point pixels, not {dtype}")
        if len(shape) not in (3, 4) or (len(shape) == 4 and shape[3] not in (1, 3)):
            raise _malformed(f"{key!r} must have shape [N, H, W] or [N, H, W, C] with C 1 or 3, not {list(shape)}")
        if shape[0] == 0:
            raise DatasetRejected("empty", f"{key!r} holds no samples")
        if max(shape[1:3]) > limits.max_image_side:
            raise DatasetRejected("image-too-large", f"{key!r} images are {shape[1]}x{shape[2]}; at most "
                                  f"{limits.max_image_side} per side")
        if shape[1] * shape[2] > limits.max_image_pixels:
            raise DatasetRejected("image-too-large", f"{key!r} images are {shape[1]}x{shape[2]}: "
                                  f"{shape[1] * shape[2]} pixels; at most {limits.max_image_pixels} an image")
        if streamed and fortran and math.prod(shape[1:]) > 1:
            raise _malformed(f"{key!r} is stored in Fortran (column-major) order, which cannot be read an image at "
                             "a time; save it in C order (numpy.ascontiguousarray) and upload it again")
    return check


def _check_y(key: str, samples: int) -> Callable[[Header], None]:
    def check(header: Header) -> None:
        shape, _, dtype = header
        if dtype.kind not in "iuUS" or len(shape) != 1:
            raise _malformed(f"{key!r} must be a 1-D array of integer or string labels, not {dtype} {list(shape)}")
        if shape[0] != samples:
            raise _malformed(f"{key!r} has {shape[0]} labels for {samples} samples")
        if dtype.itemsize > _MAX_LABEL_BYTES:
            raise _malformed(f"{key!r} holds labels of {dtype.itemsize} bytes; at most {_MAX_LABEL_BYTES}")
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


class NpzStream:
    """A checked npz's training images read as they stream: their shape [N, H, W, C] and dtype from the header,
    the size of its test split, and the rows (with their labels) a batch at a time or one row alone."""

    def __init__(self, npz: _Npz, limits: Limits) -> None:
        self._npz = npz
        self.x_key, self.y_key = _keys(npz, _KEY_PAIRS, True, "arrays 'x' and 'y' (or 'x_train' and 'y_train')")
        self._check = _check_x(self.x_key, limits, streamed=True)
        with npz.data(self.x_key, self._check) as ((shape, _, self.dtype), member):
            self._data_offset = member.position  # where the values start in the member: its header's length
        self.samples, self.source = shape[0], (shape[1], shape[2])
        self.channels = shape[3] if len(shape) == 4 else 1
        self._label_check = _check_y(self.y_key, self.samples)
        self._label_check(npz.header(self.y_key))
        self.test_samples = _test_samples(npz, shape) if self.x_key == "x_train" else None

    def labels(self) -> Iterator[np.ndarray]:
        """The raw labels, in chunks of at most BATCH_BYTES."""
        with self._npz.data(self.y_key, self._label_check) as ((_, _, dtype), member):
            per_chunk = max(1, BATCH_BYTES // dtype.itemsize)
            for start in range(0, self.samples, per_chunk):
                yield _read_values(member, min(per_chunk, self.samples - start), dtype)

    def batches(self, size: Size | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(raw labels [n], images [n, h, w, C] brought to `size` by the centre-crop policy, or as they are when
        None), every row in order, holding a batch of at most BATCH_BYTES."""
        target = size or self.source
        rows = _rows_per_batch(self.source, self.channels, self.dtype, target)
        strips = rows == 0  # a row larger than a batch: read in strips of its lines
        with self._npz.data(self.x_key, self._check) as (_, member), \
                self._npz.data(self.y_key, self._label_check) as ((_, _, label_dtype), labels):
            for start in range(0, self.samples, max(rows, 1)):
                n = min(max(rows, 1), self.samples - start)
                names = _read_values(labels, n, label_dtype)
                if strips:
                    yield names, self._fitted_row(member.read, target)[np.newaxis]
                    continue
                batch = _pixels(_read_values(member, n * self._row_values, self.dtype).reshape(
                    (n, *self.source, self.channels)), self.x_key)
                yield names, fit_pixels(batch, target) if target != self.source else batch

    def row(self, index: int, size: Size) -> np.ndarray | None:
        """Row `index`'s image [h, w, C] brought to `size`; None when there is no such row. Only that row is read
        when the array is stored uncompressed; a compressed one is read (not held) up to it."""
        if index >= self.samples:
            return None
        skipped = index * self._row_values * self.dtype.itemsize
        read = self._npz.archive.stored_reader(self._npz.members[self.x_key], self._data_offset + skipped)
        if read is not None:
            return self._fitted_row(read, size)
        with self._npz.data(self.x_key, self._check) as (_, member):
            member.skip(skipped)
            return self._fitted_row(member.read, size)

    @property
    def _row_values(self) -> int:
        return self.source[0] * self.source[1] * self.channels

    def _fitted_row(self, read: Callable[[int], bytes], size: Size) -> np.ndarray:
        """The next row from `read`, read in strips of its lines and brought to `size`."""
        height, width = self.source
        line = width * self.channels
        lines = max(1, BATCH_BYTES // (line * max(self.dtype.itemsize, 4)))

        def strips() -> Iterator[np.ndarray]:
            for start in range(0, height, lines):
                k = min(lines, height - start)
                values = np.frombuffer(read(k * line * self.dtype.itemsize), dtype=self.dtype)
                if values.shape[0] != k * line:
                    raise _malformed(f"array {self.x_key!r} ends inside a row")
                yield _pixels(values.reshape(1, k, width, self.channels), self.x_key)[0]

        return fit_strips(strips(), self.source, size)


def _rows_per_batch(source: Size, channels: int, dtype: np.dtype, target: Size) -> int:
    """How many rows a batch of at most BATCH_BYTES holds, read, converted and resized; 0 when one row does not fit
    (it is then read in strips)."""
    pixels = source[0] * source[1] * channels
    converted = pixels * (4 if dtype.kind == "f" else 1)
    fitted = target[0] * target[1] * channels * (4 if dtype.kind == "f" else 1)
    return BATCH_BYTES // (pixels * dtype.itemsize + converted + fitted)


@contextlib.contextmanager
def npz_stream(source: Path | BinaryIO, limits: Limits) -> Iterator[NpzStream]:
    """The npz's images and labels under keys x/y or x_train/y_train, checked from their headers and read as they
    stream (`NpzStream`), so that inspecting an upload never holds more than a batch of it."""
    with SafeZip(source, limits) as archive:
        yield NpzStream(_Npz(archive), limits)


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
