"""Zip archives read safely: the structure is checked before any member is read, and reads are bounded."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from domain.ingest.limits import Limits
from domain.ingest.zipcheck import RATIO_FLOOR_BYTES, bomb, check_layout, check_member, corrupt
from domain.ingest.zipcheck import nested as nested
from domain.ingest.zipdir import BadArchive, Directory, Member, Members, TooManyEntries, Window, find_end

_CHUNK = 1024 * 1024
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra field length
# Archives inside an archive are never opened: by first bytes here (zip, gzip, bzip2, xz, 7z, rar, zstd), by name
# in domain.ingest.zipcheck.
NESTED_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"7z\xbc\xaf\x27\x1c",
                 b"Rar!\x1a\x07", b"\x28\xb5\x2f\xfd")
_READ_ERRORS = (zipfile.BadZipFile, BadArchive, zlib.error, EOFError, OSError, ValueError, NotImplementedError)


class SafeZip:
    """A zip archive (a file, or a seekable binary reader such as a blob store's ranged reader) whose structure
    passed the safety checks; members are read one at a time, bounded. Its directory is held compactly
    (domain.ingest.zipdir), so checking it takes a few tens of bytes a member."""

    def __init__(self, source: Path | BinaryIO, limits: Limits) -> None:
        self._limits = limits
        self._read_total = 0
        self._fp: BinaryIO = source.open("rb") if isinstance(source, Path) else source
        self._owned = isinstance(source, Path)
        try:
            self.members = self._checked_members()
        except BaseException:
            self.close()
            raise

    def _checked_members(self) -> Members:
        limits = self._limits
        try:
            declared = find_end(self._fp)[0]
            if declared > limits.max_members:
                raise bomb(f"the archive has {declared} entries; at most {limits.max_members}")
            self._directory = directory = Directory(self._fp, limits.max_members)
        except TooManyEntries as exc:
            raise bomb(f"the archive has more than {exc} entries; at most {limits.max_members}") from exc
        except _READ_ERRORS as exc:
            raise corrupt(f"the file is not a valid zip archive ({exc})") from exc
        files = array("I", (i for i in range(len(directory)) if not check_member(directory, i, limits)))
        check_layout(directory)
        total = sum(directory.sizes)
        if total > limits.max_uncompressed_bytes:
            raise bomb(f"the archive expands to {total} bytes; at most {limits.max_uncompressed_bytes}")
        ratio = total / max(sum(directory.compressed), 1)
        if total > RATIO_FLOOR_BYTES and ratio > limits.max_compression_ratio:
            raise bomb(f"the archive expands {ratio:.0f} times; at most {limits.max_compression_ratio:g}")
        return Members(directory, files)

    def _data_start(self, info: Member) -> int:
        """Where the member's stored bytes start, after its local header, which must match its directory entry."""
        self._fp.seek(info.header_offset)
        header = self._fp.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile("bad magic number for the file header")
        _, name_len, extra_len = _LOCAL_HEADER.unpack(header)
        if self._fp.read(name_len) != self._directory.raw_name(info.index):
            raise zipfile.BadZipFile("the file name in the directory and in the header differ")
        if info.flag_bits & 0x60:
            raise NotImplementedError("compressed patched data or strong encryption")
        start: int = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        return start

    def _raw(self, info: Member, file_size: int) -> zipfile.ZipExtFile:
        """zipfile's reader of one member, built for it alone (one ZipInfo, not one per member)."""
        single = zipfile.ZipInfo(info.filename)
        single.compress_type, single.compress_size, single.file_size = (info.compress_type, info.compress_size,
                                                                        file_size)
        single.CRC, single.flag_bits = info.CRC, info.flag_bits
        return zipfile.ZipExtFile(Window(self._fp, self._data_start(info)), "r", single)

    @contextmanager
    def open(self, info: Member) -> Iterator[MemberReader]:
        """A bounded reader of one member's bytes, closed on leaving the block."""
        # Open claiming more than declared: zipfile would silently cut a member at its declared size (then fail
        # its checksum); with room to spare, a member yielding more than declared is seen as a bomb.
        try:
            raw = self._raw(info, info.file_size + _CHUNK)
        except _READ_ERRORS as exc:
            raise corrupt(f"archive member {info.filename!r} cannot be read ({exc})") from exc
        with raw:
            yield MemberReader(self, info, raw)

    @contextmanager
    def stream(self, info: Member) -> Iterator[BinaryIO]:
        """A seekable reader of one member's bytes for a decoder that reads as it goes (and may seek back to
        re-read its header): zipfile's own, which stops at the declared size; its reads count against the
        archive's read limit."""
        try:
            raw = self._raw(info, info.file_size)
        except _READ_ERRORS as exc:
            raise corrupt(f"archive member {info.filename!r} cannot be read ({exc})") from exc
        with raw, _Counted(self, info, raw) as counted:
            yield counted  # type: ignore[misc]

    def stored_reader(self, info: Member, offset: int) -> Callable[[int], bytes] | None:
        """For a member stored uncompressed, a reader of its bytes from `offset` on, straight from the archive (so
        nothing before `offset` is read: from a blob store, nothing before it is fetched); None for a compressed
        member, which can only be read from its start."""
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            return None
        try:
            start = self._data_start(info)
        except _READ_ERRORS as exc:
            raise corrupt(f"archive member {info.filename!r} has no local header ({exc})") from exc
        position, end = start + min(offset, info.file_size), start + info.file_size
        fp = self._fp

        def read(size: int) -> bytes:
            nonlocal position
            fp.seek(position)
            data = fp.read(max(0, min(size, end - position)))
            position += len(data)
            self.charge(len(data))
            return data

        return read

    def read(self, info: Member) -> bytes:
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
            raise bomb(f"the archive expands past {self._limits.max_uncompressed_bytes} bytes")

    def close(self) -> None:
        """Close the archive file when it opened it (a reader passed in is its caller's to close)."""
        if self._owned:
            self._fp.close()

    def __enter__(self) -> SafeZip:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class MemberReader:
    """Reads one archive member; refuses it when it yields more than its header declared, or less."""

    def __init__(self, archive: SafeZip, info: Member, raw: io.BufferedIOBase) -> None:
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
            raise bomb(f"archive member {self._info.filename!r} yields more bytes than its header declares")
        return b"".join(parts)

    def _chunk(self, size: int) -> bytes:
        try:
            chunk = self._raw.read(size)
        except _READ_ERRORS as exc:
            raise corrupt(f"archive member {self._info.filename!r} is corrupt ({exc})") from exc
        if not chunk and self._got < self._info.file_size:
            raise corrupt(f"archive member {self._info.filename!r} is shorter than its header declares")
        self._got += len(chunk)
        self._archive.charge(len(chunk))
        return chunk


class _Counted(io.RawIOBase):
    """A member's seekable reader whose reads count against the archive's read limit; errors become refusals."""

    def __init__(self, archive: SafeZip, info: Member, raw: io.BufferedIOBase) -> None:
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
            raise corrupt(f"archive member {self._info.filename!r} is corrupt ({exc})") from exc

    def read(self, size: int = -1, /) -> bytes:
        try:
            data = self._raw.read(size)
        except _READ_ERRORS as exc:
            raise corrupt(f"archive member {self._info.filename!r} is corrupt ({exc})") from exc
        self._archive.charge(len(data))
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)
