"""Blob storage (dataset files, trial weights): a small interface and a filesystem implementation; the S3 one is
`store.s3blobs`, and `store.blobstores.make_blob_store` chooses between them by `NETSYNTH_BLOB_URL`."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from domain.errors import InsufficientStorage, InvalidKey, NotFound

_KEY_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CHUNK = 1024 * 1024
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


@runtime_checkable
class BlobStore(Protocol):
    """Where blobs live: a folder (`FileBlobStore`) or an S3 bucket (`store.s3blobs.S3BlobStore`)."""

    def put(self, stream: BinaryIO, key: str | None = None) -> str:
        """Store the stream's bytes under `key` (a new key when None) and return the key."""
        ...

    def put_file(self, path: Path, key: str | None = None) -> str:
        """Store a local file's bytes under `key` (a new key when None), consuming the file, and return the key."""
        ...

    def staging_dir(self) -> Path:
        """A local folder for files being received before `put_file` stores them."""
        ...

    def open(self, key: str) -> BinaryIO:
        """Return a binary reader of the blob; raise NotFound when it does not exist."""
        ...

    def local_path(self, key: str) -> Path:
        """A local file holding the blob, for readers that seek in it (a remote store keeps a cached local copy);
        raise NotFound when it does not exist."""
        ...

    def sweep(self, idle_s: float = ...) -> Sequence[object]:
        """Remove what processes killed mid-write left behind, idle for `idle_s` seconds; return what was removed."""
        ...

    def delete(self, key: str) -> None:
        """Remove the blob; removing a missing blob is not an error."""
        ...

    def exists(self, key: str) -> bool:
        """Whether a blob is stored under `key`."""
        ...


def validate_key(key: str) -> str:
    """Return `key` if it is a relative, slash-separated path of safe parts; raise InvalidKey otherwise."""
    parts = key.split("/")
    if not key or len(key) > 512 or not all(_KEY_PART.match(p) and p not in {".", ".."} for p in parts):
        raise InvalidKey(f"invalid blob key {key!r}")
    return key


PARTIAL = ".part"
"""The suffix of a file still being written (`write_new`); it is renamed or removed once done."""

ABANDONED_AFTER_S = 3600.0
"""How long a partial file may go unwritten before `FileBlobStore.sweep` takes it for abandoned. A live upload
writes every few seconds; its validation after the last byte takes minutes at most."""


@contextmanager
def space_checked(what: str) -> Iterator[None]:
    """Raise InsufficientStorage for an out-of-space or over-quota OSError in the block; other errors pass."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        raise InsufficientStorage(f"no space left to store {what} ({os.strerror(exc.errno)}); nothing was kept, "
                                  "retry once space is freed") from exc


def write_new(folder: Path, stream: BinaryIO, prefix: str, what: str,
              on_chunk: Callable[[bytes], None] | None = None) -> Path:
    """Copy `stream` (`what`, for messages) to a new file in `folder`, synced to disk, passing each chunk to
    `on_chunk`; on any error the file is removed (InsufficientStorage when the disk or the quota is full)."""
    with space_checked(what):
        fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=PARTIAL)
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := stream.read(_CHUNK):
                    if on_chunk is not None:
                        on_chunk(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
    return Path(name)


class FileBlobStore:
    """Blobs as files under a root directory, each written to a temporary file and then atomically renamed."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        path = (self.root / validate_key(key)).resolve()
        if not path.is_relative_to(self.root) or path == self.root:
            raise InvalidKey(f"blob key {key!r} escapes the store")
        return path

    def put(self, stream: BinaryIO, key: str | None = None) -> str:
        """Store the stream's bytes under `key` (a new key when None) and return the key."""
        key = key if key is not None else uuid.uuid4().hex
        path = self._path(key)
        with space_checked(f"blob {key!r}"):
            path.parent.mkdir(parents=True, exist_ok=True)
        tmp = write_new(path.parent, stream, ".tmp-", f"blob {key!r}")
        try:
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return key

    def put_file(self, path: Path, key: str | None = None) -> str:
        """Store a local file's bytes under `key` (a new key when None), consuming the file, and return the key.

        A file on the store's filesystem is renamed into place; any other is copied, then removed.
        """
        key = key if key is not None else uuid.uuid4().hex
        target = self._path(key)
        with space_checked(f"blob {key!r}"):
            target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(path, target)
        except OSError:  # another filesystem: copy atomically, then drop the source
            with Path(path).open("rb") as stream:
                self.put(stream, key)
            Path(path).unlink(missing_ok=True)
        return key

    def sweep(self, idle_s: float = ABANDONED_AFTER_S) -> list[Path]:
        """Remove the partial files (`write_new`'s) that nothing has written to for `idle_s` seconds: what a process
        killed while receiving an upload or storing a blob left behind. Returns what was removed."""
        removed = []
        cutoff = time.time() - idle_s
        for path in self.root.rglob(f"*{PARTIAL}"):
            with contextlib.suppress(FileNotFoundError):  # finished or swept by another process meanwhile
                if path.is_file() and path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed.append(path)
        return removed

    def staging_dir(self) -> Path:
        """A folder on the store's filesystem for files being received (so `put_file` renames them)."""
        folder = self.root / ".staging"
        with space_checked("the upload"):
            folder.mkdir(exist_ok=True)
        return folder

    def open(self, key: str) -> BinaryIO:
        """Return a binary reader of the blob; raise NotFound when it does not exist."""
        path = self._path(key)
        try:
            return path.open("rb")
        except FileNotFoundError:
            raise NotFound(f"no blob {key!r}") from None

    def local_path(self, key: str) -> Path:
        """The blob's own file; raise NotFound when it does not exist."""
        path = self._path(key)
        if not path.is_file():
            raise NotFound(f"no blob {key!r}")
        return path

    def delete(self, key: str) -> None:
        """Remove the blob; removing a missing blob is not an error."""
        self._path(key).unlink(missing_ok=True)

    def exists(self, key: str) -> bool:
        """Whether a blob is stored under `key`."""
        return self._path(key).is_file()
