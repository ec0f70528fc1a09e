"""The S3 blob store, against a real S3-compatible server (SeaweedFS on loopback, signed requests): round trips,
streamed writes and reads in bounded memory, seeks over ranged GETs, atomic writes, errors as domain errors."""

from __future__ import annotations

import hashlib
import io
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from domain.errors import BlobStoreUnavailable, InvalidKey, NotFound
from infra.settings import Settings
from store import s3blobs
from store.blobs import BlobStore, FileBlobStore
from store.blobstores import make_blob_store
from store.s3blobs import PART_BYTES, S3BlobStore
from tests.store.s3server import ACCESS_KEY, S3Server
from tests.workers.service import free_port

MB = 1024 * 1024


class Generated(io.RawIOBase):
    """`total` pseudo-random bytes made as they are read (never held whole), failing after `fail_after` bytes when
    given, like an upload cut mid-stream; `digest` is the SHA-256 of what was handed out."""

    def __init__(self, total: int, fail_after: int | None = None) -> None:
        self.total, self.fail_after, self.sent = total, fail_after, 0
        self._hash = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.fail_after is not None and self.sent >= self.fail_after:
            raise ConnectionError("client went away")
        n = min(len(buffer), self.total - self.sent, MB)
        chunk = (self.sent // MB).to_bytes(8, "big") * (n // 8) + b"\0" * (n % 8)
        buffer[:n] = chunk
        self._hash.update(chunk)
        self.sent += n
        return n

    def digest(self) -> str:
        return self._hash.hexdigest()


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return s3_server.bucket()


@pytest.fixture
def store(s3_server: S3Server, bucket: str, tmp_path: Path) -> S3BlobStore:
    return S3BlobStore(bucket, "pre/fix", scratch=tmp_path / "scratch", client=s3_server.client())


def _keys(s3_server: S3Server, bucket: str) -> list[str]:
    return [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket).get("Contents", [])]


def _uploads(s3_server: S3Server, bucket: str) -> list[dict[str, Any]]:
    uploads: list[dict[str, Any]] = s3_server.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return uploads


def test_round_trip_exists_and_delete(store: S3BlobStore, s3_server: S3Server, bucket: str) -> None:
    assert isinstance(store, BlobStore)
    data = bytes(range(256)) * 5000
    key = store.put(io.BytesIO(data))
    given = store.put(io.BytesIO(b"hello"), "datasets/u1/abc")
    assert sorted(_keys(s3_server, bucket)) == sorted([f"pre/fix/{key}", "pre/fix/datasets/u1/abc"])
    with store.open(key) as stream:
        assert stream.read() == data
    assert store.exists(given) and not store.exists("datasets/u1/nope")
    store.delete(given)
    store.delete(given)  # a missing blob: not an error
    assert not store.exists(given) and _keys(s3_server, bucket) == [f"pre/fix/{key}"]
    with pytest.raises(NotFound):
        store.open(given)
    with pytest.raises(NotFound):
        store.local_path(given)
    with pytest.raises(InvalidKey):
        store.put(io.BytesIO(b"x"), "../escape")


def test_put_file_consumes_the_file(store: S3BlobStore, tmp_path: Path) -> None:
    staged = store.staging_dir() / "upload.bin"
    staged.write_bytes(b"staged bytes")
    key = store.put_file(staged, "datasets/x")
    assert not staged.exists()
    with store.open(key) as stream:
        assert stream.read() == b"staged bytes"


def test_ranged_reads_seek_without_fetching_the_rest(store: S3BlobStore, s3_server: S3Server, bucket: str) -> None:
    data = os.urandom(3 * MB + 123)
    key = store.put(io.BytesIO(data), "ranged")
    fetched: list[str] = []
    real_get = store.client.get_object

    def get_object(**kw: Any) -> Any:
        fetched.append(kw["Range"])
        return real_get(**kw)

    store.client.get_object = get_object
    with store.open(key) as stream:
        assert stream.seekable()
        stream.seek(-10, io.SEEK_END)
        assert stream.read() == data[-10:]
        stream.seek(MB + 5)
        assert stream.read(100) == data[MB + 5:MB + 105] and stream.tell() == MB + 105
        stream.seek(0)
        assert stream.read(4) == data[:4]
    first = s3blobs.FIRST_RANGE_BYTES  # each GET after a seek asks for a bounded range
    assert fetched == [f"bytes={len(data) - 10}-{len(data) - 1}", f"bytes={MB + 5}-{MB + 4 + first}",
                       f"bytes=0-{first - 1}"]


def _bounded(run: Any, limit: int) -> Any:
    tracemalloc.start()
    try:
        result = run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit, f"peak {peak / MB:.1f} MiB"
    return result


def test_a_large_object_streams_both_ways_in_bounded_memory(store: S3BlobStore, s3_server: S3Server,
                                                            bucket: str, tmp_path: Path) -> None:
    size = 64 * MB
    source = Generated(size)
    key = _bounded(lambda: store.put(io.BufferedReader(source, MB), "big"), 48 * MB)  # type: ignore[arg-type]
    head = s3_server.client().head_object(Bucket=bucket, Key="pre/fix/big")
    assert head["ContentLength"] == size and "-" in head["ETag"]  # sent as a multipart upload

    def read_back() -> str:
        digest = hashlib.sha256()
        with store.open(key) as stream:
            while chunk := stream.read(MB):
                digest.update(chunk)
        return digest.hexdigest()

    assert _bounded(read_back, 8 * MB) == source.digest()
    path = _bounded(lambda: store.local_path(key), 48 * MB)
    assert path.stat().st_size == size and path.is_relative_to(tmp_path / "scratch")


def test_a_failed_write_leaves_no_object(store: S3BlobStore, s3_server: S3Server, bucket: str) -> None:
    for fail_after in (1000, 3 * PART_BYTES):  # a single PUT, then a multipart upload cut after three parts
        with pytest.raises(ConnectionError):
            store.put(io.BufferedReader(Generated(64 * MB, fail_after), MB), "cut")  # type: ignore[arg-type]
        assert not store.exists("cut") and _keys(s3_server, bucket) == []
        assert _uploads(s3_server, bucket) == []  # the multipart upload was aborted


def test_sweep_aborts_abandoned_multipart_uploads(store: S3BlobStore, s3_server: S3Server, bucket: str) -> None:
    s3_server.client().create_multipart_upload(Bucket=bucket, Key="pre/fix/abandoned")
    s3_server.client().create_multipart_upload(Bucket=bucket, Key="elsewhere/not-ours")
    assert store.sweep() == []  # not idle long enough
    removed = store.sweep(idle_s=0)
    assert len(removed) == 1 and "pre/fix/abandoned" in removed[0]
    assert [u["Key"] for u in _uploads(s3_server, bucket)] == ["elsewhere/not-ours"]


def test_local_copies_are_cached_and_bounded(store: S3BlobStore) -> None:
    store.cache_bytes = 2500
    keys = [store.put(io.BytesIO(bytes([i]) * 1000), f"c{i}") for i in range(3)]
    first = store.local_path(keys[0])
    assert first.read_bytes() == b"\0" * 1000 and store.local_path(keys[0]) == first
    os.utime(first, (1, 1))  # the least recently used
    second = store.local_path(keys[1])
    store.local_path(keys[2])  # 3000 bytes would exceed 2500: the oldest goes
    assert not first.exists() and second.exists()
    store.delete(keys[1])
    assert not second.exists()


def test_wrong_credentials_are_refused(s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    wrong = S3BlobStore(bucket, scratch=tmp_path, client=s3_server.client(ACCESS_KEY, "not-the-secret"))
    with pytest.raises(BlobStoreUnavailable, match="credentials"):
        wrong.put(io.BytesIO(b"x"), "k")
    with pytest.raises(BlobStoreUnavailable, match="credentials"):
        wrong.open("k")
    unknown = S3BlobStore(bucket, scratch=tmp_path, client=s3_server.client("nobody", "nothing"))
    with pytest.raises(BlobStoreUnavailable, match="InvalidAccessKeyId"):
        unknown.put(io.BufferedReader(Generated(20 * MB), MB), "k")  # type: ignore[arg-type]
    assert _keys(s3_server, bucket) == []


def test_missing_bucket_and_unreachable_endpoint(s3_server: S3Server, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    missing = S3BlobStore("no-such-bucket-here", scratch=tmp_path, client=s3_server.client())
    with pytest.raises(BlobStoreUnavailable, match="bucket does not exist"):
        missing.open("k")
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    down = S3BlobStore("bucket", scratch=tmp_path, endpoint_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(BlobStoreUnavailable, match="does not answer"):
        down.put(io.BytesIO(b"x"), "k")
    with pytest.raises(BlobStoreUnavailable, match="does not answer"):
        down.exists("k")


@pytest.fixture
def aws_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield


def test_the_factory_chooses_by_url(s3_server: S3Server, bucket: str, tmp_path: Path, aws_env: None) -> None:
    settings = Settings(blob_dir=tmp_path / "dir", blob_url=f"s3://{bucket}/tenant/a",
                        s3_endpoint_url=s3_server.endpoint)
    blobs = make_blob_store(settings)
    assert isinstance(blobs, S3BlobStore)
    blobs.put(io.BytesIO(b"through the default chain"), "datasets/one")  # signed with the AWS_* variables
    assert _keys(s3_server, bucket) == ["tenant/a/datasets/one"]
    assert blobs.staging_dir().is_relative_to(tmp_path / "dir")
    for url, root in ((f"file://{tmp_path}/f", tmp_path / "f"), (str(tmp_path / "g"), tmp_path / "g"),
                      ("", tmp_path / "dir")):
        store = make_blob_store(Settings(blob_dir=tmp_path / "dir", blob_url=url))
        assert isinstance(store, FileBlobStore) and store.root == root.resolve()
    for bad in ("http://example.org/x", "s3://", "s3://UPPER/x", "file://host/x"):
        with pytest.raises(ValueError):
            Settings(blob_url=bad)
