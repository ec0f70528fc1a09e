"""Receiving uploads: the request body streamed with a size bound, a file part written to disk while hashed, small
bodies read whole (a form or a JSON document)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar

from anyio import to_thread
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from python_multipart.multipart import parse_options_header
from starlette.datastructures import FormData, Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect

from domain.errors import DatasetRejected, InvalidInput, PayloadTooLarge
from store.blobs import space_checked, write_new

FORM_OVERHEAD = 64 * 1024
"""Bytes a multipart body may carry beyond its file: boundaries, part headers and small fields."""
M = TypeVar("M", bound=BaseModel)


async def bounded(stream: AsyncIterator[bytes], limit: int, what: str) -> AsyncGenerator[bytes, None]:
    """Pass `stream` through, raising PayloadTooLarge as soon as more than `limit` bytes have come."""
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            raise PayloadTooLarge(f"{what} may be at most {limit} bytes")
        yield chunk


async def read_body(request: Request, limit: int, what: str) -> bytes:
    """The whole request body, refused with PayloadTooLarge as soon as it passes `limit` bytes."""
    return b"".join([chunk async for chunk in bounded(request.stream(), limit, what)])


async def _replay(body: bytes) -> AsyncGenerator[bytes, None]:
    yield body


async def read_form(headers: Headers, body: bytes, max_files: int, max_fields: int) -> FormData:
    """The multipart form of a body read whole (close it after use); InvalidInput when it cannot be read."""
    _, options = parse_options_header(headers.get("content-type", ""))
    if not options.get(b"boundary"):
        raise InvalidInput("a multipart/form-data body needs a boundary in its Content-Type")
    parser = MultiPartParser(headers, _replay(body), max_files=max_files, max_fields=max_fields)
    try:
        return await parser.parse()
    except MultiPartException as exc:
        raise InvalidInput(f"the multipart body cannot be read: {exc.message}") from exc


def read_json(schema: type[M], body: bytes) -> M:
    """A JSON body as `schema`; a RequestValidationError (a 422 saying where) when it is not one."""
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False, include_input=False)]
        ) from exc


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
    digest = hashlib.sha256()
    path = write_new(folder, source, "upload-", "the upload", digest.update)
    return path, path.stat().st_size, digest.hexdigest()


class _Parser(MultiPartParser):
    """Starlette's multipart parser, noting whether the body reached its closing boundary."""

    ended = False

    def on_end(self) -> None:
        self.ended = True


def _incomplete(why: str) -> DatasetRejected:
    return DatasetRejected("incomplete-upload", f"the upload is incomplete: {why}; nothing was kept, send it again")


async def receive_file(request: Request, folder: Path, limit: int, file_field: str = "file") -> Received:
    """Stream a multipart/form-data request's `file_field` part into `folder`; other parts are short text fields.

    Raises PayloadTooLarge past `limit` bytes of file, InvalidInput for a body that is not such a form,
    DatasetRejected('incomplete-upload') for a body cut short, InsufficientStorage when the disk is full.
    """
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidInput(f"send the dataset as multipart/form-data with a '{file_field}' part")
    check_length(request, limit + FORM_OVERHEAD, "an upload")
    body = bounded(request.stream(), limit + FORM_OVERHEAD, "an upload")
    parser = _Parser(request.headers, body, max_files=1, max_fields=16)
    try:
        with space_checked("the upload"):  # parts over 1 MiB spool to a temporary file
            form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidInput(f"the multipart body cannot be read: {exc.message}") from exc
    except ClientDisconnect as exc:
        raise _incomplete("the connection closed before the body ended") from exc
    try:
        if not parser.ended:
            raise _incomplete("the body ends before the multipart form's closing boundary (is its Content-Length "
                              "short?)")
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

