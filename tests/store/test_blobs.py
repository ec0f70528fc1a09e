"""The filesystem blob store round-trips bytes, writes atomically and keeps keys inside its root."""

from __future__ import annotations

import errno
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from domain.errors import InsufficientStorage, InvalidKey, NotFound
from store.blobs import BlobStore, FileBlobStore


class _Breaks(io.RawIOBase):
    """A stream that yields some bytes and then fails, like a dropped upload."""

    def __init__(self) -> None:
        self.calls = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.calls += 1
        if self.calls > 2:
            raise ConnectionError("client went away")
        return b"x" * 1000


def fill_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on a file tempfile.mkstemp makes exists, but writes to it go to /dev/full: ENOSPC, as on a full
    disk."""
    make = tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        fd, name = make(*args, **kwargs)
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, fd)
        os.close(full)
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def _over_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on syncing a file fails with EDQUOT, as a quota-limited filesystem reports at fsync."""
    def fsync(fd: int) -> None:
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(os, "fsync", fsync)


def test_round_trip_with_generated_and_given_keys(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    data = bytes(range(256)) * 5000  # larger than one copy chunk
    key = store.put(io.BytesIO(data))
    assert store.exists(key)
    with store.open(key) as f:
        assert f.read() == data
    assert store.put(io.BytesIO(b"abc"), "datasets/u1/train.zip") == "datasets/u1/train.zip"
    with store.open("datasets/u1/train.zip") as f:
        assert f.read() == b"abc"
    store.delete(key)
    assert not store.exists(key)
    store.delete(key)  # deleting twice is fine


def test_missing_blob_raises_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        FileBlobStore(tmp_path).open("nope")


def test_failed_write_keeps_old_content_and_leaves_no_temp_file(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    store.put(io.BytesIO(b"original"), "k")
    with pytest.raises(ConnectionError):
        store.put(_Breaks(), "k")  # type: ignore[arg-type]
    with store.open("k") as f:
        assert f.read() == b"original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]


@pytest.mark.parametrize("full", [fill_disk, _over_quota])
def test_a_full_disk_or_quota_is_insufficient_storage_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, full: Any) -> None:
    store = FileBlobStore(tmp_path)
    store.put(io.BytesIO(b"original"), "k")
    full(monkeypatch)
    with pytest.raises(InsufficientStorage, match="no space left to store blob 'k'") as caught:
        store.put(io.BytesIO(b"x" * 3_000_000), "k")
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno in (errno.ENOSPC, errno.EDQUOT)
    with store.open("k") as f:
        assert f.read() == b"original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]


def test_overwrite_replaces_content(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    store.put(io.BytesIO(b"one"), "k")
    store.put(io.BytesIO(b"two"), "k")
    with store.open("k") as f:
        assert f.read() == b"two"


@pytest.mark.parametrize("key", ["../evil", "a/../../evil", "/etc/passwd", "", ".", "a//b", "a/./b", ".hidden",
                                 "a\\..\\b", "a/b/", "..", "x" * 600])
def test_keys_that_could_escape_are_refused(tmp_path: Path, key: str) -> None:
    store = FileBlobStore(tmp_path / "root")
    with pytest.raises(InvalidKey):
        store.put(io.BytesIO(b"x"), key)
    with pytest.raises(InvalidKey):
        store.exists(key)
    with pytest.raises(InvalidKey):
        store.delete(key)
    assert not (tmp_path / "evil").exists()


def test_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = FileBlobStore(root)
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(InvalidKey):
        store.put(io.BytesIO(b"x"), "link/file")
    assert list((tmp_path / "outside").iterdir()) == []


def test_file_store_satisfies_the_protocol(tmp_path: Path) -> None:
    assert isinstance(FileBlobStore(tmp_path), BlobStore)
