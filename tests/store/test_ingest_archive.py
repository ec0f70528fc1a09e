"""Zip safety: hostile archives are refused before any member is decoded, and reads never trust headers."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest

from store.ingest import Limits
from tests.datasets import patch_zip_header, png_bytes, rejection, write_zip

PNG = png_bytes(np.zeros((4, 4, 1), dtype=np.uint8))
FEW = Limits(min_samples_per_class=1)




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
