"""The structural checks of a zip archive's directory, run before any member is read: each entry's path, kind,
encryption, method and ratio, and the layout of the stored entries (no hard links, no overlapping members)."""

from __future__ import annotations

import re
import stat
import zipfile

import numpy as np

from domain.errors import DatasetRejected
from domain.ingest.limits import Limits
from domain.ingest.zipdir import Directory

# Members smaller than this are not held to the compression ratio: tiny runs of zeros compress far past it.
RATIO_FLOOR_BYTES = 1024 * 1024
_DRIVE = re.compile(r"[A-Za-z]:")
_LOCAL_HEADER_BYTES = 30  # a member's local header before its name: its stored bytes start no earlier
_FAR = np.uint64(2**62)  # an offset or size past any file
_DTYPES = {"I": np.uint32, "Q": np.uint64}
# Archives inside an archive are never opened: by name here, by first bytes in domain.ingest.archive.
_NESTED_SUFFIXES = (".zip", ".npz", ".jar", ".gz", ".tgz", ".tar", ".bz2", ".xz", ".7z", ".rar", ".zst")


def corrupt(detail: str) -> DatasetRejected:
    return DatasetRejected("corrupt-archive", detail)


def bomb(detail: str) -> DatasetRejected:
    return DatasetRejected("zip-bomb", detail)


def nested(name: str, why: str) -> DatasetRejected:
    return DatasetRejected("nested-archive", f"archive member {name!r} {why}; archives inside the archive are not "
                           "opened: put the images themselves in class folders")


def check_member(directory: Directory, index: int, limits: Limits) -> bool:
    """Refuse the entry at `index` for its path, kind, encryption, method or ratio; whether it is a folder."""
    name = directory.name(index)
    if name.startswith("/") or "\\" in name or _DRIVE.match(name) or ".." in name.split("/"):
        raise DatasetRejected("path-traversal", f"archive member {name!r} has an unsafe path")
    if stat.S_ISLNK(directory.modes[index]):
        raise DatasetRejected("path-traversal", f"archive member {name!r} is a symbolic link")
    folder = name.endswith("/")
    if not folder and name.lower().endswith(_NESTED_SUFFIXES):
        raise nested(name, "is an archive")
    if directory.flags[index] & 0x1:
        raise corrupt(f"archive member {name!r} is encrypted; upload an archive without a password")
    if directory.methods[index] not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise corrupt(f"archive member {name!r} uses an unsupported compression method; use deflate")
    size, compressed = directory.sizes[index], directory.compressed[index]
    ratio = size / max(compressed, 1)
    if size > RATIO_FLOOR_BYTES and ratio > limits.max_compression_ratio:
        raise bomb(f"archive member {name!r} expands {ratio:.0f} times; at most {limits.max_compression_ratio:g}")
    return folder


def check_layout(directory: Directory) -> None:
    """Refuse a member stored where another already is (a hard link: two names, one stored entry) or inside
    another's stored bytes (overlapping members: the layout of a non-recursive zip bomb)."""
    if len(directory) < 2:
        return
    offsets = np.frombuffer(directory.offsets, dtype=_DTYPES[directory.offsets.typecode])
    order = np.argsort(offsets, kind="stable")  # ties keep the directory's order, as sorted() did
    starts = offsets[order].astype(np.uint64)
    np.minimum(starts, _FAR, out=starts)  # an offset or size past any file is clipped, so that no sum overflows
    compressed = np.frombuffer(directory.compressed, dtype=_DTYPES[directory.compressed.typecode])
    ends = compressed[order[:-1]].astype(np.uint64)
    np.minimum(ends, _FAR, out=ends)
    ends += starts[:-1]
    ends += _LOCAL_HEADER_BYTES
    bad = starts[1:] < ends  # a member starting where another does starts inside its header too
    del ends
    if not bad.any():
        return
    at = int(bad.argmax())
    before, after = directory.name(int(order[at])), directory.name(int(order[at + 1]))
    if starts[at + 1] == starts[at]:
        raise DatasetRejected("path-traversal", f"archive member {after!r} is a hard link: it names the stored "
                              f"entry of {before!r}")
    raise bomb(f"archive member {after!r} lies inside the stored bytes of {before!r}")
