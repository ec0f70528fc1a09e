"""Zip safety: hostile archives are refused before any member is decoded, and reads never trust headers."""

from __future__ import annotations

import io
import stat
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from domain.ingest import Limits
from tests.datasets import patch_zip_header, png_bytes, rejection, write_zip

PNG = png_bytes(np.zeros((4, 4, 1), dtype=np.uint8))
FEW = Limits(min_samples_per_class=1)


def alias_member(path: Path, name: str, shift: int) -> Path:
    """Add to the archive, in place, a central directory entry `name` for the first member's stored entry, its
    local header moved `shift` bytes on: 0 names the same stored entry twice (the zip form of a hard link), more
    starts it inside the first member's stored bytes (overlapping members)."""
    data = path.read_bytes()
    end = data.rfind(b"PK\x05\x06")
    fields = list(struct.unpack_from("<4s4H2LH", data, end))  # signature, disks, entries twice, size, offset, ...
    directory = data[fields[6] : fields[6] + fields[5]]
    name_len, extra_len, comment_len = struct.unpack_from("<3H", directory, 28)
    first = bytearray(directory[: 46 + name_len + extra_len + comment_len])
    struct.pack_into("<H", first, 28, len(name.encode()))
    struct.pack_into("<L", first, 42, struct.unpack_from("<L", first, 42)[0] + shift)
    alias = bytes(first[:46]) + name.encode() + bytes(first[46 + name_len :])
    fields[3] += 1
    fields[4] += 1
    fields[5] += len(alias)
    path.write_bytes(data[: fields[6]] + directory + alias + struct.pack("<4s4H2LH", *fields) + data[end + 22 :])
    return path


def _two_classes(*extra: tuple[str | zipfile.ZipInfo, bytes]) -> list[tuple[str | zipfile.ZipInfo, bytes]]:
    return [*extra, ("a/1.png", PNG), ("b/1.png", PNG)]


@pytest.mark.parametrize("name", ["../x.png", "a/../../x.png", "/etc/x.png", "a\\..\\x.png", "C:/x.png"])
def test_unsafe_member_paths_are_refused(tmp_path: Path, name: str) -> None:
    path = write_zip(tmp_path / "data.zip", _two_classes((name, PNG)))
    error = rejection(path, FEW)
    assert error.reason == "path-traversal"
    assert repr(name) in error.detail


def test_a_symlink_member_is_refused(tmp_path: Path) -> None:
    link = zipfile.ZipInfo("a/link.png")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    path = write_zip(tmp_path / "data.zip", _two_classes((link, b"/etc/passwd")))
    error = rejection(path, FEW)
    assert (error.reason, "symbolic link" in error.detail) == ("path-traversal", True)


def test_a_hard_link_member_is_refused(tmp_path: Path) -> None:
    path = alias_member(write_zip(tmp_path / "data.zip", _two_classes()), "b/2.png", 0)
    with zipfile.ZipFile(path) as archive:
        assert [info.header_offset for info in archive.infolist()][::2] == [0, 0]
    error = rejection(path, FEW)
    assert (error.reason, "hard link" in error.detail, "'b/2.png'" in error.detail) == ("path-traversal", True, True)


def test_a_member_inside_another_members_bytes_is_a_bomb(tmp_path: Path) -> None:
    path = alias_member(write_zip(tmp_path / "data.zip", _two_classes(), zipfile.ZIP_STORED), "b/2.png", 40)
    error = rejection(path, FEW)
    assert (error.reason, "inside the stored bytes of 'a/1.png'" in error.detail) == ("zip-bomb", True)


def nested_zip() -> bytes:
    """A small zip that expands to 8 MiB of zeros: the inner layer of a nested zip bomb."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("a/0.png", bytes(8 * 1024 * 1024))
    return inner.getvalue()


@pytest.mark.parametrize(("name", "why"), [("a/inner.zip", "is an archive"), ("a/inner.PNG", "holds an archive")])
def test_an_archive_inside_the_archive_is_refused_unopened(tmp_path: Path, name: str, why: str) -> None:
    error = rejection(write_zip(tmp_path / "data.zip", _two_classes((name, nested_zip()))), FEW)
    assert (error.reason, f"{name!r} {why}" in error.detail) == ("nested-archive", True)


def test_a_member_expanding_a_thousand_times_is_a_bomb(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "data.zip", _two_classes(("a/zeros.png", bytes(50 * 1024 * 1024))))
    error = rejection(path, FEW)
    assert error.reason == "zip-bomb"
    assert "a/zeros.png" in error.detail


def test_declared_total_over_the_limit_is_a_bomb(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "data.zip", _two_classes(), compression=zipfile.ZIP_STORED)
    assert rejection(path, Limits(min_samples_per_class=1, max_uncompressed_bytes=len(PNG))).reason == "zip-bomb"


def test_too_many_members_is_a_bomb(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "data.zip", [(f"{c}/{i}.png", PNG) for c in "ab" for i in range(3)])
    error = rejection(path, Limits(min_samples_per_class=1, max_members=5))
    assert (error.reason, "6 entries" in error.detail) == ("zip-bomb", True)


def test_a_member_yielding_more_than_its_header_declares_is_a_bomb(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "data.zip", _two_classes(("a/0.png", PNG + bytes(4 * 1024 * 1024))))
    patch_zip_header(path, "file_size", len(PNG))  # the header claims a plain PNG; 4 MiB more follow
    with zipfile.ZipFile(path) as archive:
        assert archive.infolist()[0].file_size == len(PNG)
    error = rejection(path, FEW)
    assert (error.reason, "more bytes than its header declares" in error.detail) == ("zip-bomb", True)


def test_a_member_shorter_than_its_header_declares_is_corrupt(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "data.zip", _two_classes(("a/0.png", PNG)), compression=zipfile.ZIP_STORED)
    patch_zip_header(path, "file_size", len(PNG) + 10)
    assert rejection(path, FEW).reason == "corrupt-archive"


def test_an_encrypted_member_is_refused(tmp_path: Path) -> None:
    path = patch_zip_header(write_zip(tmp_path / "data.zip", _two_classes()), "flags", 0x1)
    error = rejection(path, FEW)
    assert (error.reason, "encrypted" in error.detail) == ("corrupt-archive", True)


def test_an_unsupported_compression_method_is_refused(tmp_path: Path) -> None:
    path = write_zip(tmp_path / "data.zip", _two_classes(), compression=zipfile.ZIP_BZIP2)
    assert rejection(path, FEW).reason == "corrupt-archive"


@pytest.mark.parametrize("cut", [100, 30])
def test_a_truncated_archive_is_corrupt(tmp_path: Path, cut: int) -> None:
    whole = write_zip(tmp_path / "whole.zip", _two_classes()).read_bytes()
    path = tmp_path / "data.zip"
    path.write_bytes(whole[:-cut])
    assert rejection(path, FEW).reason == "corrupt-archive"


def test_flipped_compressed_bytes_are_corrupt(tmp_path: Path) -> None:
    payload = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    path = write_zip(tmp_path / "data.zip", _two_classes(("a/0.png", png_bytes(payload))))
    data = bytearray(path.read_bytes())
    data[200:240] = bytes(40)
    path.write_bytes(bytes(data))
    assert rejection(path, FEW).reason == "corrupt-archive"
