"""The zip directory is held compactly (issue 46): checking an archive of many members stays in bounded memory,
and members are still read as zipfile reads them (zip64, data descriptors, data before the archive)."""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from domain.errors import DatasetRejected
from domain.ingest import Limits
from domain.ingest.archive import SafeZip
from tests.datasets import rejection

MEMBERS = 200_000
PEAK_BOUND = 24 * 1024**2
"""What checking the directory of MEMBERS empty members may hold at its peak: 125 bytes a member (it takes about 72).
zipfile.ZipFile, a ZipInfo per member, peaked at 107 MB here (about 540 bytes a member), and inspecting at 152 MB."""


def _empty_members_zip(path: Path, count: int) -> Path:
    """A zip of `count` empty stored members, `a/<i>.png` and `b/<i>.png` in turn, written directly (zipfile's
    writer is slow at this count), with the zip64 end records zipfile writes past 65,535 entries."""
    local, central = bytearray(), bytearray()
    for i in range(count):
        name = f"{'ab'[i % 2]}/{i}.png".encode()
        central += struct.pack("<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 3, 20, 0, 0, 0, 0, 0x21, 0, 0, 0, len(name), 0, 0,
                               0, 0, 0o644 << 16, len(local)) + name
        local += struct.pack("<4s2B4HL2L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0x21, 0, 0, 0, len(name), 0) + name
    at = len(local) + len(central)
    zip64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, len(central), len(local))
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    path.write_bytes(bytes(local + central) + zip64 + locator + end)
    return path


def test_checking_many_empty_members_stays_in_bounded_memory(tmp_path: Path) -> None:
    path = _empty_members_zip(tmp_path / "data.zip", MEMBERS)
    tracemalloc.start()
    try:
        with SafeZip(path, Limits()) as archive:
            peak = tracemalloc.get_traced_memory()[1]
            assert len(archive.members) == MEMBERS
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BOUND, f"checking {MEMBERS} members peaked at {peak} bytes"
    first, last = archive.members[0], archive.members[-1]
    assert (first.filename, first.file_size, last.filename) == ("a/0.png", 0, f"b/{MEMBERS - 1}.png")


def test_inspecting_many_empty_members_stays_in_bounded_memory(tmp_path: Path) -> None:
    """The whole check of an upload: the directory, then the listing of images by class, then the first image."""
    path = _empty_members_zip(tmp_path / "data.zip", MEMBERS)
    tracemalloc.start()
    try:
        error = rejection(path, Limits())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (error.reason, "a/0.png" in error.detail) == ("undecodable-image", True)
    assert peak < PEAK_BOUND, f"inspecting {MEMBERS} members peaked at {peak} bytes"


def test_members_read_as_zipfile_reads_them(tmp_path: Path) -> None:
    contents = {"a/1.png": b"x" * 5000, "a/2.png": b"", "b/1.png": bytes(range(256)) * 40}
    path = tmp_path / "data.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("b/", b"")
        for name, data in contents.items():
            archive.writestr(name, data, compress_type=zipfile.ZIP_STORED if name == "a/2.png" else None)
    with SafeZip(path, Limits()) as archive:
        assert {info.filename: (info.file_size, archive.read(info)) for info in archive.members} == {
            name: (len(data), data) for name, data in contents.items()}


def test_zip64_and_data_descriptor_members_are_read(tmp_path: Path) -> None:
    """Members written to an unseekable stream carry data descriptors; force_zip64 gives them zip64 extras."""

    class Unseekable(io.RawIOBase):
        def __init__(self) -> None:
            self.data = bytearray()

        def writable(self) -> bool:
            return True

        def write(self, b: bytes) -> int:  # type: ignore[override]
            self.data += b
            return len(b)

    out = Unseekable()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in ("a/1.png", "a/2.png"):
            with archive.open(name, "w", force_zip64=True) as member:
                member.write(name.encode() * 1000)
    path = tmp_path / "data.zip"
    path.write_bytes(b"a self-extractor's stub " * 10 + bytes(out.data))  # data before the archive, as zipfile allows
    with zipfile.ZipFile(path) as reference:
        assert all(info.flag_bits & 0x8 for info in reference.infolist())
    with SafeZip(path, Limits()) as checked:
        assert [(info.filename, checked.read(info)) for info in checked.members] == [
            (name, name.encode() * 1000) for name in ("a/1.png", "a/2.png")]


def test_a_directory_holding_more_entries_than_declared_is_refused_past_the_limit(tmp_path: Path) -> None:
    path = _empty_members_zip(tmp_path / "data.zip", 10)
    data = bytearray(path.read_bytes())
    struct.pack_into("<2Q", data, data.rfind(b"PK\x06\x06") + 24, 2, 2)  # the zip64 record declares 2 entries
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetRejected) as caught:
        SafeZip(path, Limits(max_members=5))
    assert (caught.value.reason, "more than 5 entries" in caught.value.detail) == ("zip-bomb", True)


@pytest.mark.parametrize(("where", "value"), [(0, b"PK\x01\x03"), (6, b"\xff")])
def test_a_corrupt_central_directory_is_refused(tmp_path: Path, where: int, value: bytes) -> None:
    """A bad signature, or a version needed to extract past what zipfile reads."""
    path = _empty_members_zip(tmp_path / "data.zip", 3)
    data = bytearray(path.read_bytes())
    central = data.find(b"PK\x01\x02")
    data[central + where : central + where + len(value)] = value
    path.write_bytes(bytes(data))
    error = rejection(path, Limits(min_samples_per_class=1))
    assert (error.reason, error.detail.startswith("the file is not a valid zip archive")) == ("corrupt-archive", True)


def test_a_truncated_central_directory_is_refused(tmp_path: Path) -> None:
    path = _empty_members_zip(tmp_path / "data.zip", 3)
    data = bytearray(path.read_bytes())
    record = data.rfind(b"PK\x06\x06")
    struct.pack_into("<Q", data, record + 40, struct.unpack_from("<Q", data, record + 40)[0] + 7)  # size past it
    struct.pack_into("<Q", data, record + 48, struct.unpack_from("<Q", data, record + 48)[0] - 7)
    path.write_bytes(bytes(data))
    assert rejection(path, Limits(min_samples_per_class=1)).reason == "corrupt-archive"
