"""An upload's format, from its filename's extension and its first bytes, and the file-level refusals."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from domain.errors import DatasetRejected
from domain.ingest.limits import Limits

FORMATS = {".zip": "image_zip", ".npz": "npz", ".csv": "csv", ".tsv": "tsv", ".txt": "tsv"}
TEXT_FORMATS = ("csv", "tsv")
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_BINARY_MAGIC = {
    b"PK\x03\x04": "a zip archive", b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image", b"%PDF": "a PDF document", b"\x1f\x8b": "a gzip file", b"\x93NUMPY": "a .npy array",
}
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SNIFF_BYTES = 8192


def _what(head: bytes) -> str:
    return next((what for magic, what in _BINARY_MAGIC.items() if head.startswith(magic)), "binary data")


def detect_format(path: Path, filename: str, limits: Limits) -> str:
    """The format ("image_zip", "npz", "csv" or "tsv") of an upload; refuse an unknown extension, an empty or
    too large file, or content whose first bytes do not match the extension."""
    suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
    fmt = FORMATS.get(suffix)
    if fmt is None:
        known = ", ".join(sorted(FORMATS))
        raise DatasetRejected("unknown-format", f"{filename!r}: unknown file type {suffix or '(none)'}; "
                              f"upload one of {known}")
    size = path.stat().st_size
    if size == 0:
        raise DatasetRejected("empty", f"{filename!r} is empty")
    if size > limits.max_upload_bytes:
        raise DatasetRejected("too-large", f"{filename!r} has {size} bytes; at most {limits.max_upload_bytes}")
    with path.open("rb") as f:
        head = f.read(_SNIFF_BYTES)
    if fmt in TEXT_FORMATS:
        if head.startswith(_UTF16_BOMS):
            raise DatasetRejected("not-utf8", f"{filename!r} is UTF-16 encoded; save it as UTF-8")
        if any(head.startswith(magic) for magic in _BINARY_MAGIC):
            raise DatasetRejected("unknown-format", f"{filename!r} is named {suffix} but holds {_what(head)}")
    elif not head.startswith(_ZIP_MAGIC):
        raise DatasetRejected("unknown-format", f"{filename!r} is named {suffix} but holds {_what(head)}, "
                              "not a zip archive")
    return fmt
