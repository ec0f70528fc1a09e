"""Blob storage on S3's API (AWS S3 or a compatible server): streamed multipart writes that appear whole or not at
all, seekable reads over ranged GETs, and a bounded local cache for readers that need a file."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import boto3  # type: ignore[import-untyped]
from boto3.exceptions import Boto3Error  # type: ignore[import-untyped]
from boto3.s3.transfer import TransferConfig  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from domain.errors import BlobStoreUnavailable, NotFound
from store.blobs import ABANDONED_AFTER_S, PARTIAL, FileBlobStore, space_checked, validate_key

PART_BYTES = 8 * 1024 * 1024
"""The size of each part of a multipart upload, and of the first object size that is sent in parts."""

IN_MEMORY_PARTS = 3
"""Parts of a non-seekable stream held in memory at once while they are sent (so a write holds ~24 MiB at most)."""

_MISSING = frozenset({"404", "NoSuchKey", "NotFound"})
_REFUSED = frozenset({"403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                      "InvalidToken", "AuthorizationHeaderMalformed"})
_clients: dict[tuple[str | None, ...], Any] = {}
_clients_lock = threading.Lock()


def s3_client(endpoint_url: str | None = None) -> Any:
    """A shared S3 client for `endpoint_url` (None: AWS) with credentials from boto3's default chain (AWS_*
    variables, profile, instance role); path-style addressing for a custom endpoint."""
    env = tuple(os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                                  "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION"))
    with _clients_lock:  # boto3 sessions are not thread-safe; the clients they make are
        cache_key = (endpoint_url, *env)
        if cache_key not in _clients:
            session = boto3.session.Session()
            config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=60,
                            signature_version="s3v4", s3={"addressing_style": "path" if endpoint_url else "auto"})
            _clients[cache_key] = session.client("s3", endpoint_url=endpoint_url, config=config,
                                                 region_name=session.region_name or "us-east-1")
        return _clients[cache_key]


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Raise NotFound for a missing object, BlobStoreUnavailable (saying which) for a missing bucket, refused
    credentials, an endpoint that does not answer or any other failure of the store."""
    try:
        yield
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _MISSING:
            raise NotFound(f"no {what}") from None
        if code == "NoSuchBucket":
            raise BlobStoreUnavailable(f"the blob store's bucket does not exist (reading {what})") from exc
        if code in _REFUSED:
            raise BlobStoreUnavailable(f"the blob store refused the service's credentials ({code}) for {what}; "
                                       "check the AWS credentials it runs with") from exc
        raise BlobStoreUnavailable(f"the blob store failed on {what} ({code or 'no error code'})") from exc
    except (BotoCoreError, Boto3Error) as exc:
        raise BlobStoreUnavailable(f"the blob store does not answer ({type(exc).__name__}) for {what}; retry "
                                   "later") from exc


FIRST_RANGE_BYTES = 64 * 1024
"""The bytes a read asks for after a seek (more when the read wants more); each further GET of a sequential read
asks for twice the last, up to LAST_RANGE_BYTES."""
LAST_RANGE_BYTES = 64 * 1024 * 1024


class RangedReader(io.RawIOBase):
    """A seekable reader of one object over GETs of bounded ranges: a read fetches from the current position
    FIRST_RANGE_BYTES (or what it asks for, if more), a sequential read goes on with ranges twice as large each time
    (up to LAST_RANGE_BYTES), and a seek starts again small, so only about what is read is fetched and held: a
    reader of one member of a large archive fetches its directory and that member, not the archive."""

    def __init__(self, client: Any, bucket: str, key: str, size: int, what: str) -> None:
        super().__init__()
        self._client, self._bucket, self._key, self._what = client, bucket, key, what
        self.size, self._pos = size, 0
        self._body: Any = None
        self._body_end = 0
        self._span = FIRST_RANGE_BYTES

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        if base + offset != self._pos:
            self._drop()
            self._span = FIRST_RANGE_BYTES
            self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._pos >= self.size or len(view) == 0:
            return 0
        if self._body is None:
            end = min(self.size, self._pos + max(self._span, len(view)))
            with translated(self._what):
                self._body = self._client.get_object(Bucket=self._bucket, Key=self._key,
                                                     Range=f"bytes={self._pos}-{end - 1}")["Body"]
            self._body_end = end
            self._span = min(2 * self._span, LAST_RANGE_BYTES)
        with translated(self._what):
            data = self._body.read(min(len(view), self._body_end - self._pos))
        if not data:
            raise BlobStoreUnavailable(f"the blob store ended {self._what} at byte {self._pos} of {self.size}")
        view[:len(data)] = data
        self._pos += len(data)
        if self._pos >= self._body_end:  # the range is read: its connection goes back to the pool
            self._drop()
        return len(data)

    def readall(self) -> bytes:
        """The rest of the object, read in large chunks."""
        chunks = []
        while chunk := self.read(PART_BYTES):
            chunks.append(chunk)
        return b"".join(chunks)

    def _drop(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None

    def close(self) -> None:
        self._drop()
        super().close()


class S3BlobStore:
    """Blobs as objects under `prefix` in an S3 bucket. Keys are never rewritten (each blob is stored once), so a
    local copy of one stays valid until it is deleted. `scratch` is a local folder for uploads being received and
    for the cache of local copies (`local_path`), kept under `cache_bytes`: the least recently used go first, however
    recently, and a copy that alone is larger than the cap stays only until the next one is fetched."""

    def __init__(self, bucket: str, prefix: str = "", *, scratch: Path | str, cache_bytes: int = 4 * 1024**3,
                 endpoint_url: str | None = None, client: Any = None) -> None:
        self.bucket, self.prefix = bucket, prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client if client is not None else s3_client(endpoint_url)
        self.scratch = FileBlobStore(scratch)  # its sweep removes abandoned partial files of either folder
        self.cache = self.scratch.root / ".cache"
        self.cache_bytes = cache_bytes
        transfer = TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=2)
        transfer.max_in_memory_upload_chunks = IN_MEMORY_PARTS
        self.transfer = transfer

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> S3BlobStore:
        """The store of an `s3://bucket/prefix` URL (keyword arguments as for the constructor)."""
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        return cls(bucket, prefix, **kwargs)

    def _key(self, key: str) -> str:
        return self.prefix + validate_key(key)

    def put(self, stream: BinaryIO, key: str | None = None) -> str:
        """Store the stream's bytes under `key` (a new key when None) and return the key; the object appears whole
        once the last part is in, and a failed write leaves none (its multipart upload is aborted)."""
        key = key if key is not None else uuid.uuid4().hex
        with translated(f"blob {key!r}"):
            self.client.upload_fileobj(stream, self.bucket, self._key(key), Config=self.transfer)
        return key

    def put_file(self, path: Path, key: str | None = None) -> str:
        """Store a local file's bytes under `key` (a new key when None), consuming the file, and return the key."""
        with Path(path).open("rb") as stream:
            key = self.put(stream, key)
        Path(path).unlink(missing_ok=True)
        return key

    def staging_dir(self) -> Path:
        """A local folder for files being received before `put_file` sends them."""
        return self.scratch.staging_dir()

    def _size(self, key: str) -> int:
        """The blob's size; NotFound when it is missing, BlobStoreUnavailable when the bucket is (a HEAD says
        404 for both)."""
        try:
            with translated(f"blob {key!r}"):
                return int(self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ContentLength"])
        except NotFound:
            with translated("the bucket"):
                try:
                    self.client.head_bucket(Bucket=self.bucket)
                except ClientError as exc:
                    if str(exc.response.get("Error", {}).get("Code", "")) in _MISSING:
                        raise BlobStoreUnavailable("the blob store's bucket does not exist") from None
                    raise
            raise

    def open(self, key: str) -> BinaryIO:
        """Return a seekable binary reader of the blob (ranged GETs); raise NotFound when it does not exist."""
        raw = RangedReader(self.client, self.bucket, self._key(key), self._size(key), f"blob {key!r}")
        return io.BufferedReader(raw, buffer_size=FIRST_RANGE_BYTES)  # type: ignore[return-value]

    def local_path(self, key: str) -> Path:
        """A local copy of the blob in the cache, downloaded (in ranged parts, straight to disk) unless cached;
        raise NotFound when it does not exist. The whole blob is fetched: a reader of a part of it (one image of a
        dataset) uses `open`, which fetches only what is read. A reader that opened a copy keeps reading it when it is
        evicted (the file is unlinked, not overwritten)."""
        target = self.cache / hashlib.sha256(self._key(key).encode()).hexdigest()
        if target.is_file():
            with contextlib.suppress(FileNotFoundError):  # evicted meanwhile: fetched again below
                os.utime(target)
                return target
        size = self._size(key)
        with space_checked(f"a local copy of blob {key!r}"):
            self.cache.mkdir(exist_ok=True)
            self._make_room(size)
            fd, name = tempfile.mkstemp(dir=self.cache, prefix=".fetch-", suffix=PARTIAL)
            try:
                with os.fdopen(fd, "wb") as out, translated(f"blob {key!r}"):
                    self.client.download_fileobj(self.bucket, self._key(key), out, Config=self.transfer)
                os.replace(name, target)
            except BaseException:
                Path(name).unlink(missing_ok=True)
                raise
        return target

    def _make_room(self, incoming: int) -> None:
        """Evict the least recently used cached files until `incoming` more bytes fit under `cache_bytes` (or the
        cache is empty). Use is the file's modification time, which `local_path` renews at each use."""
        entries = []
        for path in self.cache.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if not path.name.endswith(PARTIAL):
                    stat = path.stat()
                    entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total + incoming <= self.cache_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size

    def delete(self, key: str) -> None:
        """Remove the blob (and this machine's cached copy); removing a missing blob is not an error."""
        with translated(f"blob {key!r}"):
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        (self.cache / hashlib.sha256(self._key(key).encode()).hexdigest()).unlink(missing_ok=True)

    def exists(self, key: str) -> bool:
        """Whether a blob is stored under `key`."""
        try:
            self._size(key)
        except NotFound:
            return False
        return True

    def sweep(self, idle_s: float = ABANDONED_AFTER_S) -> list[str]:
        """Remove the local partial files nothing has written to for `idle_s` seconds and abort the multipart
        uploads under the prefix started more than `idle_s` ago (what a killed process left); returns them."""
        removed = [str(path) for path in self.scratch.sweep(idle_s)]
        cutoff = datetime.now(UTC) - timedelta(seconds=idle_s)
        with translated("the multipart uploads"):
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket,
                                                                                  Prefix=self.prefix)
            for upload in (u for page in pages for u in page.get("Uploads", [])):
                if upload["Initiated"] < cutoff:
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=upload["Key"],
                                                       UploadId=upload["UploadId"])
                    removed.append(f"s3://{self.bucket}/{upload['Key']} (upload {upload['UploadId']})")
        return removed
