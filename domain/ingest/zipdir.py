"""A zip archive's central directory read compactly: a few tens of bytes a member, whatever their number.

zipfile.ZipFile builds a ZipInfo object (about 800 bytes with its name) for every member before anything can be
checked, so a small upload of millions of empty members would make the process hold gigabytes while it is checked
(issue 46). No library reads the directory into flat arrays, so this one streams it a chunk at a time into typed
arrays (offsets, sizes, CRCs, flags, methods, modes) and one bytes buffer of the names; a `Member` is built only
when one is asked for. It follows zipfile's reading of the records (end of archive, zip64, data before the
archive, the zip64 extra field, name encodings) so that the same archives are read the same way.
"""

from __future__ import annotations

import io
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, overload

_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_CHUNK = 1024 * 1024
_MAX_EXTRACT_VERSION = 63  # zipfile's: later versions are not read
_UTF8_NAME = 0x800


class BadArchive(ValueError):
    """The file is not a zip archive this reader can read; the message says why."""


class TooManyEntries(Exception):
    """The directory holds more entries than allowed; raised as soon as one more is found."""


@dataclass(frozen=True, slots=True)
class Member:
    """One entry of the central directory: its name (decoded as zipfile decodes it) and what reading it needs."""

    index: int
    filename: str
    header_offset: int
    compress_size: int
    file_size: int
    CRC: int  # zipfile.ZipInfo's name, so that a Member reads like one
    compress_type: int
    flag_bits: int

    def is_dir(self) -> bool:
        return self.filename.endswith("/")


def find_end(f: BinaryIO) -> tuple[int, int, int, int]:
    """(declared entries, central directory size, its offset as declared, where the data before the archive ends)
    from the end-of-archive record, and the zip64 one when present, as zipfile reads them."""
    size = f.seek(0, 2)
    tail_len = min(size, _EOCD.size + 0xFFFF)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    pos = tail.rfind(b"PK\x05\x06")
    if pos < 0 or pos + _EOCD.size > len(tail):
        raise BadArchive("no end-of-archive record")
    _, _, _, _, entries, size_cd, offset_cd, _ = _EOCD.unpack_from(tail, pos)
    location = size - tail_len + pos
    end_of_directory = location
    if pos >= _ZIP64_LOCATOR.size and tail[pos - _ZIP64_LOCATOR.size : pos - _ZIP64_LOCATOR.size + 4] == b"PK\x06\x07":
        record_at = location - _ZIP64_LOCATOR.size - _ZIP64_EOCD.size
        if record_at < 0:
            raise BadArchive("the zip64 end-of-archive record is missing")
        f.seek(record_at)
        record = f.read(_ZIP64_EOCD.size)
        if len(record) != _ZIP64_EOCD.size or record[:4] != b"PK\x06\x06":
            raise BadArchive("the zip64 end-of-archive record is missing")
        entries, size_cd, offset_cd = _ZIP64_EOCD.unpack(record)[7:10]
        end_of_directory = record_at
    concat = end_of_directory - size_cd - offset_cd  # bytes before the archive (a self-extractor's stub)
    if concat < 0:
        raise BadArchive("bad offset for the central directory")
    return entries, size_cd, offset_cd, concat


def _zip64(extra: bytes, values: list[int]) -> None:
    """Replace, in place, the (size, compressed size, offset) values at their 32-bit maximum with the zip64 extra
    field's, in zipfile's order; refuse a malformed extra field."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        if at + 4 + length > len(extra):
            raise BadArchive(f"corrupt extra field {kind:04x} (size={length})")
        if kind == 1:
            field, used = extra[at + 4 : at + 4 + length], 0
            for i, value in enumerate(values):
                if value == 0xFFFFFFFF:
                    if used + 8 > len(field):
                        raise BadArchive("corrupt zip64 extra field: a value is missing")
                    values[i] = struct.unpack_from("<Q", field, used)[0]
                    used += 8
        at += 4 + length


def _appended(column: array[int], value: int) -> array[int]:
    """The column with `value` appended: itself, or a 64-bit copy when the value does not fit its 32 bits."""
    try:
        column.append(value)
    except OverflowError:
        column = array("Q", column)
        column.append(value)
    return column


class Directory(Sequence[Member]):
    """Every entry of the central directory, in its order, held as flat arrays."""

    def __init__(self, f: BinaryIO, max_entries: int) -> None:
        """Read the directory from `f`; raise BadArchive when it is malformed, and TooManyEntries once it holds
        more than `max_entries` entries, before more is read."""
        _, size_cd, offset_cd, concat = find_end(f)
        self.concat = concat
        # 32-bit columns, widened to 64 bits only when a value needs it (a zip64 member, a directory past 4 GiB)
        self.offsets, self.compressed, self.sizes = array("I"), array("I"), array("I")
        self.crcs, self.flags, self.methods, self.modes = array("I"), array("H"), array("H"), array("H")
        self._name_ends, self._names = array("I"), bytearray()
        f.seek(offset_cd + concat)
        buffer, at, left = b"", 0, size_cd
        while left > 0 or at < len(buffer):
            end = self._entry(buffer, at, max_entries)
            if end >= 0:
                at = end
                continue
            more = f.read(min(_CHUNK, left))  # an entry is under 200 KiB: a chunk completes it
            if not more:
                raise BadArchive("the central directory is truncated")
            buffer, at, left = buffer[at:] + more, 0, left - len(more)

    def _entry(self, buffer: bytes, at: int, max_entries: int) -> int:
        """Parse the entry at `at` in `buffer`; where it ends, or -1 when the buffer holds only part of it."""
        if len(buffer) - at < _CENTRAL.size:
            return -1
        fields = _CENTRAL.unpack_from(buffer, at)
        if fields[0] != b"PK\x01\x02":
            raise BadArchive("bad magic number for the central directory")
        name_len: int = fields[12]
        extra_len, comment_len = fields[13:15]
        name_at = at + _CENTRAL.size
        end: int = name_at + name_len + extra_len + comment_len
        if len(buffer) < end:
            return -1
        if fields[3] > _MAX_EXTRACT_VERSION:
            raise BadArchive(f"zip file version {fields[3] / 10:.1f}")
        if len(self.offsets) >= max_entries:
            raise TooManyEntries(max_entries)
        flags = fields[5]
        raw_name = buffer[name_at : name_at + name_len]
        try:
            raw_name.decode("utf-8" if flags & _UTF8_NAME else "cp437")
        except UnicodeDecodeError as exc:
            raise BadArchive(f"a member's name is not valid UTF-8 ({exc})") from exc
        values = [fields[11], fields[10], fields[18]]  # size, compressed size, offset: zipfile's zip64 order
        _zip64(buffer[name_at + name_len : name_at + name_len + extra_len], values)
        self.sizes = _appended(self.sizes, values[0])
        self.compressed = _appended(self.compressed, values[1])
        self.offsets = _appended(self.offsets, values[2] + self.concat)
        self.crcs.append(fields[9])
        self.flags.append(flags)
        self.methods.append(fields[6])
        self.modes.append(fields[17] >> 16)
        self._names += raw_name
        self._name_ends = _appended(self._name_ends, len(self._names))
        return end

    def raw_name(self, index: int) -> bytes:
        """The member's name as stored in the directory."""
        return bytes(self._names[self._name_ends[index - 1] if index else 0 : self._name_ends[index]])

    def name(self, index: int) -> str:
        """The member's name as zipfile gives it: decoded by its flag, cut at a NUL."""
        encoding = "utf-8" if self.flags[index] & _UTF8_NAME else "cp437"
        return self.raw_name(index).decode(encoding).split("\0", 1)[0]

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, index: int) -> Member: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Member]: ...

    def __getitem__(self, index: int | slice) -> Member | Sequence[Member]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        i = index % len(self)
        return Member(i, self.name(i), self.offsets[i], self.compressed[i], self.sizes[i], self.crcs[i],
                      self.methods[i], self.flags[i])

    def __iter__(self) -> Iterator[Member]:
        return (self[i] for i in range(len(self)))


class Members(Sequence[Member]):
    """The entries of a directory at the given indices (its files: no folders), each built when asked for."""

    def __init__(self, directory: Directory, indices: array[int]) -> None:
        self._directory, self._indices = directory, indices

    def __len__(self) -> int:
        return len(self._indices)

    @overload
    def __getitem__(self, index: int) -> Member: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Member]: ...

    def __getitem__(self, index: int | slice) -> Member | Sequence[Member]:
        if isinstance(index, slice):
            return [self._directory[i] for i in self._indices[index]]
        return self._directory[self._indices[index]]

    def __iter__(self) -> Iterator[Member]:
        return (self._directory[i] for i in self._indices)


class Window(io.RawIOBase):
    """The archive's reader seen from one member's stored bytes on, with its own position: another member's
    reader (or a stored reader) may move the shared file between reads."""

    def __init__(self, fp: BinaryIO, start: int) -> None:
        super().__init__()
        self._fp, self._start, self._position = fp, start, start

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET:
            raise OSError("a member's window seeks from its start only")
        self._position = offset
        return offset

    def read(self, size: int = -1, /) -> bytes:
        self._fp.seek(self._position)
        data = self._fp.read(size)
        self._position += len(data)
        return data
