"""CSV and TSV uploads: encoding, quoting, line-numbered refusals and the text part of the profile."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import DatasetRejected
from domain.ingest import Limits, inspect_file
from tests.datasets import load_texts, rejection, write_text_csv, write_text_tsv

FEW = Limits(min_samples_per_class=1)


def _rejection(path: Path, content: bytes, limits: Limits = FEW) -> DatasetRejected:
    path.write_bytes(content)
    return rejection(path, limits)


def test_csv_with_a_bom_quoted_commas_and_newlines(tmp_path: Path) -> None:
    content = ('\ufeffid,Label,TEXT\n1,pos,"great, really great"\n2,neg,"bad\non two lines"\n'
               '3,pos,"she said ""yes"""\n4,neg,meh\n')
    path = tmp_path / "reviews.csv"
    path.write_text(content, encoding="utf-8")
    inspection = inspect_file(path, "reviews.csv", FEW)
    assert (inspection.format, inspection.modality, inspection.classes) == ("csv", "text", ["neg", "pos"])
    assert inspection.class_counts == {"neg": 2, "pos": 2}
    data = load_texts(path, "csv", FEW)
    assert data.texts == ["great, really great", "bad\non two lines", 'she said "yes"', "meh"]
    np.testing.assert_array_equal(data.y, [1, 0, 1, 0])


def test_tsv_neunets_style_splits_on_the_last_tab_and_skips_empty_lines(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_text("good movie\tpos\n\nawful\tneg\r\nfine\tthen\tpos\n   \nworst ever\tneg\n", encoding="utf-8")
    inspection = inspect_file(path, "data.txt", FEW)
    assert (inspection.format, inspection.class_counts) == ("tsv", {"neg": 2, "pos": 2})
    assert load_texts(path, "tsv", FEW).texts == ["good movie", "awful", "fine\tthen", "worst ever"]


def test_the_text_profile_summarises_lengths_and_duplicates(tmp_path: Path) -> None:
    texts = ["one", "two words", "three more words", "one", "one", "two words"]
    labels = ["a", "b", "a", "a", "b", "b"]
    profile = inspect_file(write_text_tsv(tmp_path / "d.tsv", texts, labels), "d.tsv", FEW).profile
    assert profile["duplicates"] == {"count": 3, "conflicting": 1}
    assert profile["text"]["words"] == {"min": 1.0, "mean": 1.667, "median": 1.5, "p95": 2.75, "max": 3.0}
    assert profile["text"]["chars"]["max"] == 16.0 and profile["text"]["chars"]["min"] == 3.0
    assert json.loads(json.dumps(profile)) == profile


def test_empty_texts_are_kept_and_counted_in_the_profile(tmp_path: Path) -> None:
    """An empty text is real input (a blank review, an emptied message): it is kept with its label, and the profile
    says how many there are."""
    path = tmp_path / "d.csv"
    path.write_text('text,label\nhello,a\n,b\n"  ",a\nworld,b\n', encoding="utf-8")
    inspection = inspect_file(path, "d.csv", FEW)
    assert inspection.class_counts == {"a": 2, "b": 2}
    assert inspection.profile["text"]["empty"] == 2
    assert load_texts(path, "csv", FEW).texts == ["hello", "", "  ", "world"]
    tsv = tmp_path / "d.tsv"
    tsv.write_text("hello\ta\n\tb\nworld\tb\n", encoding="utf-8")
    assert load_texts(tsv, "tsv", FEW).texts == ["hello", "", "world"]


def test_numeric_labels_sort_numerically(tmp_path: Path) -> None:
    path = write_text_csv(tmp_path / "d.csv", ["a", "b", "c", "d"], ["10", "2", "10", "2"])
    assert inspect_file(path, "d.csv", FEW).classes == ["2", "10"]


def test_bad_utf8_is_refused_with_its_line_and_offset(tmp_path: Path) -> None:
    error = _rejection(tmp_path / "d.csv", b"text,label\nok,a\nbad \xff byte,b\n")
    assert error.reason == "not-utf8"
    assert "line 3" in error.detail and "byte offset 20" in error.detail


@pytest.mark.parametrize(("content", "line", "offset"), [
    (b"text,label\nhe\x00llo,a\n", 2, 13),  # in the first bytes: once refused as "binary data"
    (b"text,label\n" + b"hello there,a\n" * 1000 + b"bye,b\x00\n", 1002, 14016),  # past the format sniffing
    ("text,label\nhello,a\n".encode("utf-16-le"), 1, 1),  # UTF-16 without a byte-order mark
])
def test_a_nul_byte_is_refused_with_its_line_and_offset(tmp_path: Path, content: bytes, line: int,
                                                        offset: int) -> None:
    error = _rejection(tmp_path / "d.csv", content)
    assert error.reason == "nul-bytes"
    assert f"line {line} (byte offset {offset})" in error.detail, error.detail


@pytest.mark.parametrize(
    ("name", "content", "reason", "line"),
    [
        ("d.csv", b"sentence,label\nhello,a\n", "malformed-csv", 1),  # no text column
        ("d.csv", b"text,label\nhello,a\nworld,b,extra\n", "malformed-csv", 3),  # ragged
        ("d.csv", b"text,label\nhello,a\nworld,\n", "malformed-csv", 3),  # empty label
        ("d.tsv", b"hello\ta\n\nno tab here\n", "malformed-tsv", 3),
        ("d.tsv", b"x" * 50 + b"\ta\n", "text-too-long", 1),
        ("d.csv", b'text,label\n"' + b"x" * 50 + b'",a\n', "text-too-long", 2),
    ],
)
def test_bad_lines_are_refused_with_their_number(
        tmp_path: Path, name: str, content: bytes, reason: str, line: int) -> None:
    error = _rejection(tmp_path / name, content, Limits(min_samples_per_class=1, max_text_chars=49))
    assert error.reason == reason
    assert re.match(rf"line {line}\b", error.detail), error.detail


def test_a_line_far_over_the_length_limit_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    error = _rejection(tmp_path / "d.tsv", b"x" * 200_000 + b"\ta\n", Limits(max_text_chars=10))
    assert error.reason == "text-too-long"


def test_a_csv_with_only_a_header_has_no_samples(tmp_path: Path) -> None:
    assert _rejection(tmp_path / "d.csv", b"text,label\n").reason == "empty"


_TEXTS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=40).filter(
    lambda text: text.strip() != "")


@pytest.mark.parametrize(("fmt", "write"), [("csv", write_text_csv), ("tsv", write_text_tsv)])
@settings(max_examples=60)
@given(texts=st.lists(_TEXTS, min_size=2, max_size=12))
def test_texts_round_trip(tmp_path_factory: pytest.TempPathFactory, fmt: str, write: Any, texts: list[str]) -> None:
    if fmt == "tsv":  # a TSV text is one line
        texts = [text.replace("\n", "_").replace("\r", "_") for text in texts]
        if texts[0].startswith("\ufeff"):  # at the very start of a file it is the byte-order mark, dropped
            texts[0] = "x" + texts[0]
    labels = [["spam", "ham"][i % 2] for i in range(len(texts))]
    data = load_texts(write(tmp_path_factory.mktemp(fmt) / f"d.{fmt}", texts, labels), fmt, FEW)
    assert data.texts == texts
    assert [data.classes[i] for i in data.y] == labels
