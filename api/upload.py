"""Receiving uploads: the request body streamed with a size bound, a file part written to disk while hashed."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from anyio import to_thread
from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from store.errors import InvalidInput, PayloadTooLarge

FORM_OVERHEAD = 64 * 1024
"""Bytes a multipart body may carry beyond its file: boundaries, part headers and small fields."""


async def bounded(stream: AsyncIterator[bytes], limit: int, what: str) -> AsyncGenerator[bytes, None]:
    """Pass `stream` through, raising PayloadTooLarge as soon as more than `limit` bytes have come."""
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            raise PayloadTooLarge(f"{what} may be at most {limit} bytes")
        yield chunk


def check_length(request: Request, limit: int, what: str) -> None:
    """Refuse at once a request whose declared Content-Length is over `limit`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"{what} may be at most {limit} bytes; this one declares {declared}")


@dataclass
class Received:
    """A file part saved to `path`, with its original name, size, SHA-256 and the form's text fields."""

    path: Path
    filename: str
    size: int
    sha256: str
    fields: dict[str, str] = field(default_factory=dict)

    def discard(self) -> None:
        """Remove the saved file, if it is still there."""
        self.path.unlink(missing_ok=True)


def _save(source: BinaryIO, folder: Path) -> tuple[Path, int, str]:
    digest, size = hashlib.sha256(), 0
    fd, name = tempfile.mkstemp(dir=folder, prefix="upload-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(1024 * 1024):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name), size, digest.hexdigest()


async def receive_file(request: Request, folder: Path, limit: int, file_field: str = "file") -> Received:
    """Stream a multipart/form-data request's `file_field` part into `folder`; other parts are short text fields.

    Raises PayloadTooLarge past `limit` bytes of file, InvalidInput for a body that is not such a form.
    """
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidInput(f"send the dataset as multipart/form-data with a '{file_field}' part")
    check_length(request, limit + FORM_OVERHEAD, "an upload")
    body = bounded(request.stream(), limit + FORM_OVERHEAD, "an upload")
    parser = MultiPartParser(request.headers, body, max_files=1, max_fields=16)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidInput(f"the multipart body cannot be read: {exc.message}") from exc
    try:
        upload = form.get(file_field)
        if not isinstance(upload, UploadFile):
            raise InvalidInput(f"the form has no file part named '{file_field}'")
        fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
        path, size, sha = await to_thread.run_sync(_save, upload.file, folder)
    finally:
        await form.close()
    received = Received(path, Path(upload.filename or "upload").name, size, sha, fields)
    if size > limit:
        received.discard()
        raise PayloadTooLarge(f"an upload may be at most {limit} bytes")
    return received

