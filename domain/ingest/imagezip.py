"""Images in a zip of class folders (`cat/1.png`, optionally under one wrapping folder), decoded one at a time.

Nothing reads a member whole: a size is read from the first bytes of its image, an image is decoded as its member
streams, and a member over the per-image file limits is refused before its pixels are decoded.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar, overload

import numpy as np

from domain.errors import DatasetRejected
from domain.ingest.archive import NESTED_MAGIC, SafeZip, nested
from domain.ingest.images import check_file_size, decode_pixels, image_size
from domain.ingest.labels import check_classes
from domain.ingest.limits import Limits
from domain.ingest.resize import Size
from domain.ingest.zipdir import Member

_IGNORED = {"__macosx", "thumbs.db", "desktop.ini"}
HEADER_READS = (64 * 1024, 1024 * 1024, 8 * 1024 * 1024)
"""How many first bytes of an image are read to find its size: more only when its header (metadata, colour
profile) goes on past them."""
T = TypeVar("T")


def _visible_parts(name: str) -> list[str] | None:
    """The path's parts, or None for what uploads carry by accident: hidden files, macOS and Windows leftovers."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if not parts or any(part.startswith(".") or part.lower() in _IGNORED for part in parts):
        return None
    return parts


def visible_files(files: Iterable[tuple[T, str]]) -> list[tuple[T, list[str]]]:
    """Each (item, "/"-separated path) that is not a hidden file or OS leftover, with its path's parts; without
    the one root folder that wraps them all when every file lies in a subfolder of it."""
    visible = [(item, parts) for item, name in files if (parts := _visible_parts(name))]
    if len({parts[0] for _, parts in visible}) == 1 and all(len(parts) >= 3 for _, parts in visible):
        visible = [(item, parts[1:]) for item, parts in visible]  # one wrapping root folder
    return visible


class ClassMembers(Sequence[tuple[Member, str]]):
    """An archive's image members with their classes, held as two flat arrays (the member's position among the
    archive's files, its class's number), so that a listing of millions of members stays a few bytes each; a
    (member, class name) pair is built only when asked for."""

    def __init__(self, members: Sequence[Member], positions: array[int], codes: array[int],
                 labels: list[str]) -> None:
        self._members, self._positions, self._codes, self._labels = members, positions, codes, labels

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, index: int) -> tuple[Member, str]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[Member, str]]: ...

    def __getitem__(self, index: int | slice) -> tuple[Member, str] | Sequence[tuple[Member, str]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._members[self._positions[index]], self._labels[self._codes[index]]

    def __iter__(self) -> Iterator[tuple[Member, str]]:
        return (self[i] for i in range(len(self)))


def class_members(archive: SafeZip, limits: Limits) -> ClassMembers:
    """Each image member with its class (folder) name; refuse a bad layout or bad class counts before decoding.
    As `visible_files` sees the paths, in two passes over the directory rather than holding every path's parts."""
    members = archive.members
    roots: set[str] = set()
    deep = True
    for info in members:  # first pass: is there one root folder wrapping every file?
        if parts := _visible_parts(info.filename):
            if len(roots) < 2:
                roots.add(parts[0])
            deep = deep and len(parts) >= 3
    wrapped = len(roots) == 1 and deep
    positions, codes, numbers, counts = array("I"), array("I"), dict[str, int](), Counter[str]()
    for position, info in enumerate(members):
        if not (parts := _visible_parts(info.filename)):
            continue
        if wrapped:
            parts = parts[1:]
        if len(parts) != 2:
            where = "at the top of the archive" if len(parts) < 2 else "nested below a class folder"
            raise DatasetRejected(
                "bad-layout", f"{info.filename!r} is {where}; put each image in a folder named after its class "
                "(cat/1.png, dog/2.jpg)")
        positions.append(position)
        codes.append(numbers.setdefault(parts[0], len(numbers)))
        counts[parts[0]] += 1
    check_classes(counts, limits)
    return ClassMembers(members, positions, codes, list(numbers))


def member_size(archive: SafeZip, info: Member, limits: Limits) -> Size:
    """The (height, width) of a member's image, read from its first bytes; refused, before any pixel is decoded,
    when the member is larger than the per-image file limit or than an image of that size needs."""
    check_file_size(info.file_size, info.filename, limits)
    with archive.open(info) as member:
        head = member.read(HEADER_READS[0])
        if head.startswith(NESTED_MAGIC):
            raise nested(info.filename, "holds an archive")
        for more in (*HEADER_READS[1:], 0):
            try:
                size = image_size(head, info.filename, limits)
                break
            except DatasetRejected as exc:  # a header longer than the bytes read so far reads as undecodable
                if exc.reason != "undecodable-image" or member.remaining == 0 or not more:
                    raise
            head += member.read(more - len(head))
    check_file_size(info.file_size, info.filename, limits, size)
    return size


def zip_sizes(archive: SafeZip, limits: Limits) -> Counter[Size]:
    """How many images of each native (height, width) the archive holds, read from their headers only."""
    return Counter(member_size(archive, info, limits) for info, _ in class_members(archive, limits))


def member_pixels(archive: SafeZip, info: Member, limits: Limits, channels: int | None = None,
                  size: Size | None = None) -> tuple[np.ndarray, bool]:
    """A member's image decoded as it streams (`decode_pixels`), after its file's size is checked."""
    check_file_size(info.file_size, info.filename, limits)
    with archive.stream(info) as stream:
        return decode_pixels(stream, info.filename, limits, channels, size)


def zip_images(archive: SafeZip, limits: Limits, size: Size | None) -> Iterator[tuple[str, np.ndarray, bool]]:
    """(class name, uint8 pixels [H, W, C], whether resized) of every image, decoded one member at a time and
    brought to `size` (height, width) by the centre-crop policy when given."""
    for info, label in class_members(archive, limits):
        pixels, resized = member_pixels(archive, info, limits, size=size)
        yield label, pixels, resized
