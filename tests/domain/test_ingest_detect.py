"""Format detection: the extension and the first bytes must agree; empty and oversized uploads are refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from domain.ingest import Limits, inspect_file
from tests.datasets import png_bytes, rejection, write_text_tsv


def test_an_unknown_extension_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    path.write_bytes(b"PAR1")
    assert rejection(path, Limits()).reason == "unknown-format"


def test_a_png_renamed_zip_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "photo.zip"
    path.write_bytes(png_bytes(np.zeros((4, 4, 3), dtype=np.uint8)))
    error = rejection(path, Limits())
    assert (error.reason, "PNG image" in error.detail) == ("unknown-format", True)


def test_a_npy_renamed_npz_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(3))
    assert rejection(path, Limits(), "x.npz").reason == "unknown-format"


def test_a_zip_named_csv_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_bytes(b"PK\x03\x04" + bytes(40))
    assert rejection(path, Limits()).reason == "unknown-format"


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "data.zip"
    path.write_bytes(b"")
    assert rejection(path, Limits()).reason == "empty"


def test_a_file_over_the_upload_limit_is_refused(tmp_path: Path) -> None:
    path = write_text_tsv(tmp_path / "data.tsv", ["a b c"] * 10, ["x", "y"] * 5)
    assert rejection(path, Limits(max_upload_bytes=20)).reason == "too-large"


def test_a_utf16_text_file_is_refused_as_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_bytes("text,label\nhello,a\n".encode("utf-16"))
    assert rejection(path, Limits()).reason == "not-utf8"


def test_the_extension_is_read_from_the_upload_name_case_insensitively(tmp_path: Path) -> None:
    path = write_text_tsv(tmp_path / "blob-1234", [f"text {i}" for i in range(10)], ["x", "y"] * 5)
    assert inspect_file(path, "C:\\Users\\ada\\Reviews.TXT", Limits()).format == "tsv"
