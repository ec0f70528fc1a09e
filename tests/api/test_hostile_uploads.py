"""The hostile-upload corpus (docs/api.md, "Hostile uploads"): each file is refused with a 4xx problem+json and its
precise `reason`, and leaves no dataset row, no blob and no temporary file; bodies cut short or with a lying
Content-Length, sent over raw sockets to uvicorn, keep nothing either; a formula-like label is accepted and echoed
back verbatim; a full disk answers 507 and the service goes on."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import uuid
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from infra.settings import Settings
from store.models import Dataset
from tests.api.conftest import Account, assert_problem
from tests.api.test_datasets import dataset_rows, files_left, upload
from tests.datasets import digits_arrays, patch_zip_header, png_bytes, write_npz, write_text_csv, write_zip
from tests.domain.test_bounded_inspection import header_only_npz
from tests.domain.test_ingest_archive import alias_member, nested_zip
from tests.domain.test_ingest_images import claim_size
from tests.store.test_blobs import fill_disk
from tests.workers.service import ApiServer, wait_for

pytestmark = pytest.mark.anyio
URL = "/api/v1/datasets"
MIB = 1024 * 1024
Build = Callable[[Path], Path]


@dataclass(frozen=True)
class Hostile:
    """A hostile file: how it is built in a folder, the `reason` it is refused with, words its detail holds."""

    build: Build
    reason: str
    says: str


@cache
def _png(i: int, fmt: str = "PNG") -> bytes:
    return png_bytes(digits_arrays()[0][i], fmt)


def _members(*extra: tuple[str | zipfile.ZipInfo, bytes], counts: tuple[int, ...] = (6, 6),
             ) -> list[tuple[str | zipfile.ZipInfo, bytes]]:
    """`extra` members, then class folders a, b, ... of counts[k] digit images each (a valid dataset alone)."""
    return [*extra, *((f"{'ab'[k]}/{i}.png", _png(i)) for k, count in enumerate(counts) for i in range(count))]


def _zip(*extra: tuple[str | zipfile.ZipInfo, bytes], counts: tuple[int, ...] = (6, 6),
         compression: int = zipfile.ZIP_DEFLATED, then: Callable[[Path], Path] = lambda path: path) -> Build:
    return lambda folder: then(write_zip(folder / "data.zip", _members(*extra, counts=counts), compression))


@cache
def _junk(size: int) -> bytes:
    """`size` random bytes (deflate cannot shrink them: no zip-bomb refusal comes first)."""
    return np.random.default_rng(0).bytes(size)


def _file(name: str, data: bytes) -> Build:
    def build(folder: Path) -> Path:
        (folder / name).write_bytes(data)
        return folder / name
    return build


def _cut(fraction: float, build: Build) -> Build:
    """The file `build` makes, cut to its first `fraction`."""
    def cut(folder: Path) -> Path:
        path = build(folder)
        path.write_bytes(path.read_bytes()[: int(path.stat().st_size * fraction)])
        return path
    return cut


def _symlink() -> zipfile.ZipInfo:
    link = zipfile.ZipInfo("a/link.png")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    return link


CSV = b"text,label\n" + b"hello there,a\n" * 6 + b"bye now,b\n" * 6
CORPUS: dict[str, Hostile] = {
    "zip-bomb-member": Hostile(_zip(("a/big.png", bytes(8 * MIB))), "zip-bomb", "'a/big.png' expands"),
    "zip-bomb-archive": Hostile(_zip(*((f"a/z{i}.png", bytes(900 * 1024)) for i in range(3))), "zip-bomb",
                                "the archive expands"),
    "zip-bomb-header-lies": Hostile(
        _zip(("a/x.png", _png(0) + bytes(4 * MIB)), then=lambda p: patch_zip_header(p, "file_size", len(_png(0)))),
        "zip-bomb", "more bytes than its header declares"),
    "zip-bomb-overlapping": Hostile(_zip(compression=zipfile.ZIP_STORED, then=lambda p: alias_member(p, "b/9.png", 40)),
                                    "zip-bomb", "inside the stored bytes"),
    "nested-zip": Hostile(_zip(("a/inner.zip", nested_zip())), "nested-archive", "'a/inner.zip' is an archive"),
    "nested-zip-as-png": Hostile(_zip(("a/inner.png", nested_zip())), "nested-archive", "holds an archive"),
    "path-dotdot": Hostile(_zip(("../evil.png", _png(0))), "path-traversal", "'../evil.png' has an unsafe path"),
    "path-absolute": Hostile(_zip(("/etc/evil.png", _png(0))), "path-traversal", "'/etc/evil.png'"),
    "symlink": Hostile(_zip((_symlink(), b"/etc/passwd")), "path-traversal", "is a symbolic link"),
    "hard-link": Hostile(_zip(then=lambda p: alias_member(p, "b/9.png", 0)), "path-traversal", "is a hard link"),
    "truncated-zip": Hostile(_cut(0.5, _zip()), "corrupt-archive", "not a valid zip archive"),
    "decompression-bomb": Hostile(_zip(("a/bomb.png", claim_size(_png(0), 60_000, 60_000))), "image-too-large",
                                  "a/bomb.png"),
    "png-then-30-mb-of-junk": Hostile(_zip(("a/junk.png", _png(0) + _junk(30 * MIB))), "image-too-large",
                                      "a/junk.png has 31457"),
    "jpeg-with-data-after-its-end": Hostile(_zip(("a/tail.jpg", _png(1, "JPEG") + _junk(2 * MIB))), "image-too-large",
                                            "data after the image's end counts against its limits"),
    "image-over-the-pixel-limit": Hostile(_zip(("a/wide.png", claim_size(_png(0), 4096, 4096))), "image-too-large",
                                          "16777216 pixels"),
    "npz-rows-over-the-pixel-limit": Hostile(lambda folder: header_only_npz(folder / "d.npz", (12, 4096, 4096, 3)),
                                             "image-too-large", "16777216 pixels"),
    "npz-fortran-order": Hostile(lambda folder: write_npz(folder / "d.npz", x=np.asfortranarray(
        np.zeros((12, 8, 8, 3), np.uint8)), y=np.arange(12) % 2), "malformed-npz", "Fortran"),
    "corrupt-png": Hostile(_zip(("a/cut.png", _png(1)[:-30])), "undecodable-image", "a/cut.png"),
    "corrupt-jpeg": Hostile(_zip(("a/cut.jpg", _png(1, "JPEG")[:-100])), "undecodable-image", "a/cut.jpg"),
    "not-an-image": Hostile(_zip(("a/readme.png", b"hello")), "undecodable-image", "a/readme.png"),
    "invalid-utf8": Hostile(_file("d.csv", CSV + b"caf\xe9,b\n"), "not-utf8", "line 14"),
    "utf16": Hostile(_file("d.csv", CSV.decode().encode("utf-16")), "not-utf8", "UTF-16"),
    "nul-byte": Hostile(_file("d.csv", b"text,label\nhe\x00llo,a\n" + CSV[11:]), "nul-bytes", "line 2"),
    "nul-byte-in-late-label": Hostile(_file("d.csv", CSV + b"filler,a\n" * 1000 + b"bye,c\x00\n" * 6), "nul-bytes",
                                      "line 1014"),
    "line-10mb": Hostile(_file("d.csv", CSV + b"x" * (10 * MIB) + b",a\n"), "text-too-long", "line 14"),
    "ragged-csv": Hostile(_file("d.csv", CSV + b"no label\n"), "malformed-csv", "line 14"),
    "one-class": Hostile(_zip(counts=(12,)), "too-few-classes", "found 1 class ('a')"),
    "class-below-minimum": Hostile(_zip(counts=(6, 2)), "too-few-samples", "'b' (2)"),
    "npz-without-x-y": Hostile(lambda folder: write_npz(folder / "d.npz", images=np.zeros((12, 8, 8), np.uint8)),
                               "malformed-npz", "'x'"),
    "png-named-zip": Hostile(_file("pic.zip", _png(0)), "unknown-format", "a PNG image"),
    "unknown-extension": Hostile(_file("data.parquet", b"PAR1" * 10), "unknown-format", ".parquet"),
    "empty": Hostile(_file("empty.csv", b""), "empty", "is empty"),
}


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder temporary files go to (the multipart parser spools parts over 1 MiB), the test's own."""
    folder = tmp_path / "spool"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def assert_nothing_kept(settings: Settings, factory: sessionmaker[Session], spool: Path) -> None:
    """No dataset row, no file under the blob store, no temporary file."""
    assert (dataset_rows(factory), files_left(settings), list(spool.iterdir())) == (0, [], [])


@pytest.mark.parametrize("item", list(CORPUS))
async def test_each_hostile_file_is_refused_and_leaves_nothing(
        item: str, client: httpx.AsyncClient, account: Account, tmp_path: Path, settings: Settings,
        factory: sessionmaker[Session], spool: Path) -> None:
    hostile = CORPUS[item]
    (tmp_path / "files").mkdir()
    body = assert_problem(await upload(client, account, hostile.build(tmp_path / "files")), 422)
    assert (body["type"], body["reason"]) == ("urn:netsynth:problem:dataset-rejected", hostile.reason), body
    assert hostile.says in str(body["detail"]), body["detail"]
    assert_nothing_kept(settings, factory, spool)


FORMULAS = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0", "-2+3"]


async def test_formula_labels_are_accepted_stored_verbatim_and_echoed_escaped(
        client: httpx.AsyncClient, account: Account, tmp_path: Path, factory: sessionmaker[Session]) -> None:
    """A label is data, not a formula: kept as given, returned as a JSON string; the service writes no spreadsheet."""
    path = write_text_csv(tmp_path / "f.csv", [f"text {i}" for i in range(20)], [FORMULAS[i % 4] for i in range(20)])
    r = await upload(client, account, path)
    assert r.status_code == 201, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert (body["classes"], body["class_counts"]) == (sorted(FORMULAS), {label: 5 for label in FORMULAS})
    assert '"=HYPERLINK(\\"http://x\\",\\"y\\")"' in r.text  # the quotes escaped, the string whole
    assert (await client.get(f"{URL}/{body['id']}", headers=account.auth)).json()["classes"] == sorted(FORMULAS)
    with factory() as s:
        assert s.get_one(Dataset, uuid.UUID(body["id"])).classes == sorted(FORMULAS)


BOUNDARY = "hostile-boundary"
FORM = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="d.csv"\r\n\r\n'.encode() + CSV
        + f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n\r\ncut\r\n--{BOUNDARY}--\r\n'.encode())
CUT = len(FORM) // 2


def _chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n"  # and no last, empty chunk


# (the body's framing header, the bytes sent, whether the client then closes at once or half-closes and reads)
RAW: dict[str, tuple[str, bytes, bool]] = {
    "cut-mid-stream": (f"Content-Length: {len(FORM)}", FORM[:CUT], True),
    "chunked-cut-mid-stream": ("Transfer-Encoding: chunked", _chunked(FORM[:CUT]), True),
    "content-length-longer": (f"Content-Length: {len(FORM) + 1000}", FORM, False),
    "content-length-shorter-in-file": (f"Content-Length: {CUT}\r\nConnection: close", FORM[:CUT], False),
    "content-length-shorter-after-file": (f"Content-Length: {len(FORM) - 12}\r\nConnection: close",
                                          FORM[:len(FORM) - 12], False),
    "content-length-shorter-then-more-bytes": (f"Content-Length: {CUT}", FORM, False),
}


def _send(port: int, key: str, framing: str, payload: bytes, close: bool) -> bytes:
    """POST to /datasets over a raw socket; what the server answered until it closed (nothing when `close`)."""
    head = (f"POST {URL} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n{framing}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + payload)
        if close:
            return b""
        if framing.startswith("Content-Length") and int(framing.split()[1]) > len(payload):
            sock.shutdown(socket.SHUT_WR)  # the rest never comes
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
        return reply


def _problem(reply: bytes) -> tuple[int, str, dict[str, object]]:
    """The status, content type and body of the first response in `reply`."""
    head, _, rest = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers["content-type"], json.loads(rest[: int(headers["content-length"])])


class Finished:
    """An ASGI app around another, counting the HTTP requests it has finished with, however they ended."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            self.count += scope["type"] == "http"


@pytest.fixture
def server(settings: Settings) -> Iterator[tuple[ApiServer, Finished]]:
    """uvicorn serving the app on a free port, and the count of requests it has finished with."""
    with ApiServer(settings) as running:
        config = running.server.config
        config.loaded_app = finished = Finished(config.loaded_app)  # each new connection takes it up
        yield running, finished
    cast(FastAPI, config.app).state.engine.dispose()


@pytest.mark.parametrize("item", list(RAW))
def test_a_body_cut_short_or_with_a_lying_length_keeps_nothing(
        item: str, server: tuple[ApiServer, Finished], account: Account, settings: Settings,
        factory: sessionmaker[Session], spool: Path, caplog: pytest.LogCaptureFixture) -> None:
    uvicorn, finished = server
    framing, payload, close = RAW[item]
    reply = _send(uvicorn.port, account.key, framing, payload, close)
    wait_for(lambda: finished.count == 1, 30, "the app to finish with the request", 0.05)
    if item == "content-length-shorter-then-more-bytes":  # the bytes past the length are a malformed next request:
        assert reply.startswith(b"HTTP/1.1 400 ")  # the HTTP parser (httptools) refuses them and closes
    elif "shorter" in item:  # the body is what the length says: cut, so refused
        status, kind, body = _problem(reply)
        assert (status, kind, body.get("reason")) == (422, "application/problem+json", "incomplete-upload"), body
    else:  # the client is gone or never finishes: no one to answer
        assert reply == b""
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert_nothing_kept(settings, factory, spool)
    assert httpx.get(f"{uvicorn.url}/api/v1/health").status_code == 200


@asynccontextmanager
async def _serving(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client
    app.state.engine.dispose()


async def _full_then_serving(client: httpx.AsyncClient, account: Account, path: Path, settings: Settings,
                             factory: sessionmaker[Session], spool: Path) -> None:
    """Assert the upload of `path` onto a full disk is refused with 507 and leaves nothing, and the service goes on."""
    body = assert_problem(await upload(client, account, path), 507)
    assert body["type"] == "urn:netsynth:problem:insufficient-storage"
    assert "no space left to store the upload" in str(body["detail"])
    assert_nothing_kept(settings, factory, spool)
    assert (await client.get("/api/v1/health")).status_code == 200


async def test_a_full_disk_answers_507_and_keeps_nothing(
        client: httpx.AsyncClient, account: Account, tmp_path: Path, settings: Settings,
        factory: sessionmaker[Session], spool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_text_csv(tmp_path / "d.csv", ["hello there", "bye now"] * 6, ["a", "b"] * 6)
    with monkeypatch.context() as patch:
        fill_disk(patch)
        await _full_then_serving(client, account, path, settings, factory, spool)
    assert (await upload(client, account, path)).status_code == 201
    documented = (await client.get("/api/v1/openapi.json")).json()["paths"]["/api/v1/datasets"]["post"]["responses"]
    assert "application/problem+json" in documented["507"]["content"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for the test; skipped where mounting is not permitted."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a 1 MiB tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


async def test_a_real_full_filesystem_answers_507_and_frees_what_it_wrote(
        db_url: str, small_disk: Path, account: Account, tmp_path: Path, factory: sessionmaker[Session],
        spool: Path) -> None:
    settings = Settings(database_url=db_url, blob_dir=small_disk, broker_url=f"filesystem://{tmp_path}/broker")
    async with _serving(settings) as client:
        texts = [f"hello there number {i}" for i in range(100_000)]  # a valid 2.4 MB dataset
        big = write_text_csv(tmp_path / "big.csv", texts, ["ab"[i % 2] for i in range(100_000)])
        await _full_then_serving(client, account, big, settings, factory, spool)
        assert shutil.disk_usage(small_disk).used < 64 * 1024  # the partial file's blocks are free again
        small = write_text_csv(tmp_path / "small.csv", ["hello there", "bye now"] * 6, ["a", "b"] * 6)
        assert (await upload(client, account, small)).status_code == 201
