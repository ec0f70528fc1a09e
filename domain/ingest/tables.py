"""Texts, labelled or not, read line by line from CSV (header with text and label columns) or TSV (text<TAB>label)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import BinaryIO

from domain.errors import DatasetRejected
from domain.ingest.limits import Limits

_BOM = "\ufeff"
# A physical line may hold a text of max_text_chars 4-byte characters plus this much for the other columns.
_LINE_SLACK_BYTES = 64 * 1024


def _lines(path: Path | BinaryIO, limits: Limits) -> Iterator[tuple[int, str]]:
    """(line number, decoded line with its newline) of a file or a binary reader, one line in memory at a time."""
    max_bytes = limits.max_text_chars * 4 + _LINE_SLACK_BYTES
    offset = 0
    with path.open("rb") if isinstance(path, Path) else nullcontext(path) as f:
        line_no = 0
        while raw := f.readline(max_bytes + 1):
            line_no += 1
            if len(raw) > max_bytes:
                raise DatasetRejected(
                    "text-too-long", f"line {line_no} is longer than {max_bytes} bytes; texts may have at most "
                    f"{limits.max_text_chars} characters")
            if (nul := raw.find(b"\x00")) >= 0:
                raise DatasetRejected(
                    "nul-bytes", f"line {line_no} (byte offset {offset + nul}) holds a NUL byte, which no text has; "
                    "save the file as UTF-8 text")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetRejected(
                    "not-utf8", f"line {line_no} (byte offset {offset + exc.start}) is not valid UTF-8; "
                    "save the file as UTF-8") from exc
            offset += len(raw)
            yield line_no, line.removeprefix(_BOM) if line_no == 1 else line


def _sample(
    text: str, label: str | None, line_no: int, fmt: str, limits: Limits,
) -> tuple[int, str, str | None]:
    if label is not None and not label.strip():
        raise DatasetRejected(f"malformed-{fmt}", f"line {line_no} has an empty label")
    if len(text) > limits.max_text_chars:
        raise DatasetRejected(
            "text-too-long", f"line {line_no} has a text of {len(text)} characters; at most {limits.max_text_chars}")
    return line_no, text, None if label is None else label.strip()


def _csv_rows(path: Path | BinaryIO, limits: Limits, labelled: bool) -> Iterator[tuple[int, str, str | None]]:
    reader = csv.reader(line for _, line in _lines(path, limits))
    try:
        header = next(reader, None)
        if header is None:
            raise DatasetRejected("empty", "the CSV file has no header row")
        names = [name.strip().lower() for name in header]
        if "text" not in names or (labelled and "label" not in names):
            wanted = "a 'text' and a 'label' column" if labelled else "a 'text' column (and optionally 'label')"
            raise DatasetRejected("malformed-csv", f"line 1: the header must have {wanted}; found {header}")
        text_at, label_at = names.index("text"), names.index("label") if "label" in names else None
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise DatasetRejected(
                    "malformed-csv", f"line {reader.line_num}: {len(row)} fields where the header has {len(header)}")
            label = None if label_at is None else row[label_at]
            yield _sample(row[text_at], label, reader.line_num, "csv", limits)
    except csv.Error as exc:
        if "field larger than field limit" in str(exc):
            raise DatasetRejected(
                "text-too-long", f"line {reader.line_num}: a field is longer than {csv.field_size_limit()} "
                "characters") from exc
        raise DatasetRejected("malformed-csv", f"line {reader.line_num}: {exc}") from exc


def _tsv_rows(path: Path | BinaryIO, limits: Limits, labelled: bool) -> Iterator[tuple[int, str, str | None]]:
    for line_no, line in _lines(path, limits):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        text, tab, label = line.rpartition("\t")
        if not tab and labelled:
            raise DatasetRejected("malformed-tsv", f"line {line_no} has no tab between the text and the label")
        yield _sample(text, label, line_no, "tsv", limits) if tab else _sample(line, None, line_no, "tsv", limits)


def text_rows(path: Path | BinaryIO, fmt: str, limits: Limits) -> Iterator[tuple[str, str]]:
    """(text, label) pairs of a "csv" or "tsv" file, streamed; malformed lines are refused with their number."""
    rows = _csv_rows(path, limits, True) if fmt == "csv" else _tsv_rows(path, limits, True)
    return ((text, label) for _, text, label in rows if label is not None)  # labelled rows always have one


def text_lines(path: Path, fmt: str, limits: Limits) -> Iterator[tuple[int, str, str | None]]:
    """(line number, text, label or None) of a "csv" file (with or without a label column) or a "tsv" file
    (`text<TAB>label` or just `text` per line), streamed; malformed lines are refused with their number."""
    return _csv_rows(path, limits, False) if fmt == "csv" else _tsv_rows(path, limits, False)
