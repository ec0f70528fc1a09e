"""Zip archives read safely: the structure is checked before any member is read, and reads are bounded."""

from __future__ import annotations

import copy
import io
import itertools
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import TracebackType
from typing import IO, BinaryIO

from domain.errors import DatasetRejected
from domain.ingest.limits import Limits

_CHUNK = 1024 * 1024
# Members smaller than this are not held to the compression ratio: tiny runs of zeros compress far past it.
RATIO_FLOOR_BYTES = 1024 * 1024
_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_DRIVE = re.compile(r"[A-Za-z]:")
_LOCAL_HEADER_BYTES = 30  # a member's local header before its name: its stored bytes start no earlier
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra field length
# Archives inside an archive are never opened: by name, and by first bytes (zip, gzip, bzip2, xz, 7z, rar, zstd).
_NESTED_SUFFIXES = (".zip", ".npz", ".jar", ".gz", ".tgz", ".tar", ".bz2", ".xz", ".7z", ".rar", ".zst")
NESTED_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"7z\xbc\xaf\x27\x1c",
                 b"Rar!\x1a\x07", b"\x28\xb5\x2f\xfd")
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError)


def _corrupt(detail: str) -> DatasetRejected:
    return DatasetRejected("corrupt-archive", detail)


def _bomb(detail: str) -> DatasetRejected:
    return DatasetRejected("zip-bomb", detail)


def _declared_entries(source: Path | BinaryIO) -> int:
    """The entry count the end-of-archive record declares, read before the central directory is parsed."""
    with source.open("rb") if isinstance(source, Path) else nullcontext(source) as f:
        size = f.seek(0, 2)
        tail_len = min(size, _EOCD.size + 0xFFFF)
        f.seek(size - tail_len)
        tail = f.read(tail_len)
        pos = tail.rfind(b"PK\x05\x06")
        if pos < 0 or pos + _EOCD.size > len(tail):
            raise _corrupt("the file is not a valid zip archive (no end-of-archive record)")
        entries: int = _EOCD.unpack_from(tail, pos)[4]
        if entries == 0xFFFF and pos >= _ZIP64_LOCATOR.size:
            locator = _ZIP64_LOCATOR.unpack_from(tail, pos - _ZIP64_LOCATOR.size)
            if locator[0] == b"PK\x06\x07":
                f.seek(locator[2])
                record = f.read(_ZIP64_EOCD.size)
                if len(record) == _ZIP64_EOCD.size and record[:4] == b"PK\x06\x06":
                    entries = _ZIP64_EOCD.unpack(record)[7]
    return entries


def nested(name: str, why: str) -> DatasetRejected:
    return DatasetRejected("nested-archive", f"archive member {name!r} {why}; archives inside the archive are not "
                           "opened: put the images themselves in class folders")


def _check_member(info: zipfile.ZipInfo, limits: Limits) -> None:
    name = info.filename
    if name.startswith("/") or "\\" in name or _DRIVE.match(name) or ".." in name.split("/"):
        raise DatasetRejected("path-traversal", f"archive member {name!r} has an unsafe path")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise DatasetRejected("path-traversal", f"archive member {name!r} is a symbolic link")
    if not info.is_dir() and name.lower().endswith(_NESTED_SUFFIXES):
        raise nested(name, "is an archive")
    if info.flag_bits & 0x1:
        raise _corrupt(f"archive member {name!r} is encrypted; upload an archive without a password")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise _corrupt(f"archive member {name!r} uses an unsupported compression method; use deflate")
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > RATIO_FLOOR_BYTES and ratio > limits.max_compression_ratio:
        raise _bomb(f"archive member {name!r} expands {ratio:.0f} times; at most {limits.max_compression_ratio:g}")


def _check_layout(infos: list[zipfile.ZipInfo]) -> None:
    """Refuse a member stored where another already is (a hard link: two names, one stored entry) or inside
    another's stored bytes (overlapping members: the layout of a non-recursive zip bomb)."""
    for before, after in itertools.pairwise(sorted(infos, key=lambda info: info.header_offset)):
        if after.header_offset == before.header_offset:
            raise DatasetRejected("path-traversal", f"archive member {after.filename!r} is a hard link: it names "
                                  f"the stored entry of {before.filename!r}")
        if after.header_offset < before.header_offset + _LOCAL_HEADER_BYTES + before.compress_size:
            raise _bomb(f"archive member {after.filename!r} lies inside the stored bytes of {before.filename!r}")


class SafeZip:
    """A zip archive (a file, or a seekable binary reader such as a blob store's ranged reader) whose structure
    passed the safety checks; members are read one at a time, bounded."""

    def __init__(self, source: Path | BinaryIO, limits: Limits) -> None:
        self._limits = limits
        self._read_total = 0
        declared = _declared_entries(source)
        if declared > limits.max_members:
            raise _bomb(f"the archive has {declared} entries; at most {limits.max_members}")
        try:
            self._zip = zipfile.ZipFile(source)
        except _READ_ERRORS as exc:
            raise _corrupt(f"the file is not a valid zip archive ({exc})") from exc
        try:
            self.members = self._checked_members()
        except BaseException:
            self._zip.close()
            raise

    def _checked_members(self) -> list[zipfile.ZipInfo]:
        limits = self._limits
        infos = self._zip.infolist()
        if len(infos) > limits.max_members:
            raise _bomb(f"the archive has {len(infos)} entries; at most {limits.max_members}")
        for info in infos:
            _check_member(info, limits)
        _check_layout(infos)
        total = sum(info.file_size for info in infos)
        if total > limits.max_uncompressed_bytes:
            raise _bomb(f"the archive expands to {total} bytes; at most {limits.max_uncompressed_bytes}")
        ratio = total / max(sum(info.compress_size for info in infos), 1)
        if total > RATIO_FLOOR_BYTES and ratio > limits.max_compression_ratio:
            raise _bomb(f"the archive expands {ratio:.0f} times; at most {limits.max_compression_ratio:g}")
        return [info for info in infos if not info.is_dir()]

    @contextmanager
    def open(self, info: zipfile.ZipInfo) -> Iterator[MemberReader]:
        """A bounded reader of one member's bytes, closed on leaving the block."""
        # Open a copy that claims more than declared: zipfile would silently cut a member at its declared size
        # (then fail its checksum); with room to spare, a member yielding more than declared is seen as a bomb.
        probe = copy.copy(info)
        probe.file_size = info.file_size + _CHUNK
        try:
            raw = self._zip.open(probe)
        except _READ_ERRORS as exc:
            raise _corrupt(f"archive member {info.filename!r} cannot be read ({exc})") from exc
        with raw:
            yield MemberReader(self, info, raw)

    @contextmanager
    def stream(self, info: zipfile.ZipInfo) -> Iterator[BinaryIO]:
        """A seekable reader of one member's bytes for a decoder that reads as it goes (and may seek back to
        re-read its header): zipfile's own, which stops at the declared size; its reads count against the
        archive's read limit."""
        try:
            raw = self._zip.open(info)
        except _READ_ERRORS as exc:
            raise _corrupt(f"archive member {info.filename!r} cannot be read ({exc})") from exc
        with raw, _Counted(self, info, raw) as counted:
            yield counted  # type: ignore[misc]

    def stored_reader(self, info: zipfile.ZipInfo, offset: int) -> Callable[[int], bytes] | None:
        """For a member stored uncompressed, a reader of its bytes from `offset` on, straight from the archive (so
        nothing before `offset` is read: from a blob store, nothing before it is fetched); None for a compressed
        member, which can only be read from its start."""
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            return None
        fp = self._zip.fp
        assert fp is not None
        fp.seek(info.header_offset)
        signature, name_len, extra_len = _LOCAL_HEADER.unpack(fp.read(_LOCAL_HEADER.size))
        if signature != b"PK\x03\x04":
            raise _corrupt(f"archive member {info.filename!r} has no local header")
        start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        position, end = start + min(offset, info.file_size), start + info.file_size

        def read(size: int) -> bytes:
            nonlocal position
            fp.seek(position)
            data = fp.read(max(0, min(size, end - position)))
            position += len(data)
            self.charge(len(data))
            return data

        return read

    def read(self, info: zipfile.ZipInfo) -> bytes:
        """One member's bytes, read in bounded chunks; refused when they are an archive, whatever the name."""
        with self.open(info) as member:
            data = member.read()
        if data.startswith(NESTED_MAGIC):
            raise nested(info.filename, "holds an archive")
        return data

    def charge(self, size: int) -> None:
        """Count `size` more bytes read from the archive; refuse once the total passes the limit."""
        self._read_total += size
        if self._read_total > self._limits.max_uncompressed_bytes:
            raise _bomb(f"the archive expands past {self._limits.max_uncompressed_bytes} bytes")

    def close(self) -> None:
        """Close the archive file."""
        self._zip.close()

    def __enter__(self) -> SafeZip:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class MemberReader:
    """Reads one archive member; refuses it when it yields more than its header declared, or less."""

    def __init__(self, archive: SafeZip, info: zipfile.ZipInfo, raw: IO[bytes]) -> None:
        self._archive = archive
        self._info = info
        self._raw = raw
        self._got = 0

    @property
    def remaining(self) -> int:
        """Bytes of the member not read yet, as its header declares."""
        return self._info.file_size - self._got

    @property
    def position(self) -> int:
        """Bytes of the member read so far."""
        return self._got

    def skip(self, size: int) -> None:
        """Read past the next `size` bytes (fewer only at the member's declared end), a chunk at a time."""
        while size > 0 and self.remaining > 0:
            size -= len(self.read(min(size, _CHUNK)))

    def read(self, size: int = -1, /) -> bytes:
        """`size` bytes (all when negative), fewer only at the member's declared end; read in bounded chunks."""
        parts = []
        wanted = self.remaining if size < 0 else min(size, self.remaining)
        while wanted > 0:
            chunk = self._chunk(min(wanted, _CHUNK))
            parts.append(chunk)
            wanted -= len(chunk)
        if self._got == self._info.file_size and self._chunk(1):
            raise _bomb(f"archive member {self._info.filename!r} yields more bytes than its header declares")
        return b"".join(parts)

    def _chunk(self, size: int) -> bytes:
        try:
            chunk = self._raw.read(size)
        except _READ_ERRORS as exc:
            raise _corrupt(f"archive member {self._info.filename!r} is corrupt ({exc})") from exc
        if not chunk and self._got < self._info.file_size:
            raise _corrupt(f"archive member {self._info.filename!r} is shorter than its header declares")
        self._got += len(chunk)
        self._archive.charge(len(chunk))
        return chunk


class _Counted(io.RawIOBase):
    """A member's seekable reader whose reads count against the archive's read limit; errors become refusals."""

    def __init__(self, archive: SafeZip, info: zipfile.ZipInfo, raw: IO[bytes]) -> None:
        super().__init__()
        self._archive, self._info, self._raw = archive, info, raw

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._raw.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        try:
            return self._raw.seek(offset, whence)
        except _READ_ERRORS as exc:
            raise _corrupt(f"archive member {self._info.filename!r} is corrupt ({exc})") from exc

    def read(self, size: int = -1, /) -> bytes:
        try:
            data = self._raw.read(size)
        except _READ_ERRORS as exc:
            raise _corrupt(f"archive member {self._info.filename!r} is corrupt ({exc})") from exc
        self._archive.charge(len(data))
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)
