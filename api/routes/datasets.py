"""`/datasets`: upload (streamed to disk, validated and profiled before it is accepted), list, read, delete."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.admission import outside
from api.deps import CurrentUser, SessionDep, SettingsDep
from api.openapi import ProblemRoute, problems
from api.schemas import storable
from api.schemas.datasets import DatasetOut
from api.upload import Received, receive_file
from domain.errors import (
    Conflict,
    DatasetRejected,
    InsufficientStorage,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
)
from domain.ingest import inspect_file
from infra.settings import Settings
from store.blobs import BlobStore
from store.blobstores import make_blob_store
from store.jobs import TERMINAL
from store.models import Dataset, DatasetStatus, Job, Modality, User
from store.quotas import check_storage

router = APIRouter(route_class=ProblemRoute, prefix="/datasets", tags=["datasets"])
_RESIZE = re.compile(r"^\s*(\d{1,4})\s*[x,]\s*(\d{1,4})\s*$")

UPLOAD_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file"],
    "properties": {
        "file": {"type": "string", "format": "binary", "description":
                 "zip of class folders of PNG/JPEG images; .npz with x and y (or x_train, y_train); "
                 "CSV with a `text,label` header; TSV `text<TAB>label` lines without header"},
        "name": {"type": "string", "maxLength": 200, "description": "default: the file name without extension"},
        "resize": {"type": "string", "example": "32x32",
                   "description": "HEIGHTxWIDTH every image is resized to (centre-crop), instead of the "
                                  "automatic size: native up to 64 px, else the median size capped at 64 px"}}}}}}}


def get_blobs(settings: SettingsDep) -> BlobStore:
    """The blob store dataset files live in."""
    return make_blob_store(settings)


BlobsDep = Annotated[BlobStore, Depends(get_blobs)]
NO_DATASET: dict[type[Exception], str] = {NotFound: "No such dataset of the caller's."}


def owned_dataset(session: Session, user: User, dataset_id: uuid.UUID) -> Dataset:
    """The user's dataset `dataset_id`; NotFound for a missing one and for another user's alike."""
    dataset = session.get(Dataset, dataset_id)
    if dataset is None or dataset.owner_id != user.id:
        raise NotFound(f"no dataset {dataset_id}")
    return dataset


def checked_text(value: str, what: str, limit: int) -> str:
    """`value` if it fits its column: at most `limit` characters the database can store; InvalidInput otherwise."""
    if len(value) > limit:
        raise InvalidInput(f"{what} may be at most {limit} characters")
    try:
        return storable(value)
    except ValueError as exc:
        raise InvalidInput(f"{what} {exc}") from exc


def _form_options(received: Received) -> tuple[str, tuple[int, int] | None]:
    checked_text(received.filename, "a file name", 255)
    name = checked_text(received.fields.get("name", "").strip() or Path(received.filename).stem or "dataset",
                 "a dataset name", 200)
    resize = None
    if raw := received.fields.get("resize", "").strip():
        match = _RESIZE.match(raw)
        if match is None or min(int(match[1]), int(match[2])) < 1:
            raise InvalidInput(f"resize must look like HEIGHTxWIDTH (e.g. 32x32), not {raw!r}")
        resize = (int(match[1]), int(match[2]))
    return name, resize


def _accept(session: Session, blobs: BlobStore, settings: Settings, user: User, received: Received) -> Dataset:
    """Validate and profile the received file, then store it and its row together (or neither). The file is stored
    first, and the storage quota checked and the row added under the user's lock, so that concurrent uploads are
    checked one after the other without holding the lock (on SQLite, every writer's) while the file is copied."""
    name, resize = _form_options(received)
    taken = select(Dataset.id).where(Dataset.owner_id == user.id, Dataset.name == name)
    if session.scalars(taken).first() is not None:
        raise Conflict(f"you already have a dataset named {name!r}; pass another 'name'")
    found = inspect_file(received.path, received.filename, settings.ingest_limits(resize))
    key = blobs.put_file(received.path, f"datasets/{user.id.hex}/{uuid.uuid4().hex}")  # before the lock: it is slow
    try:
        check_storage(session, user, settings, received.size)  # the user's lock, held until the row is committed
        dataset = Dataset(owner_id=user.id, name=name, modality=Modality(found.modality), format=found.format,
                          filename=received.filename, classes=found.classes, class_counts=found.class_counts,
                          sample_count=found.sample_count, size_bytes=received.size, profile=found.profile,
                          checksum=received.sha256, blob_key=key, status=DatasetStatus.READY)
        session.add(dataset)
        session.commit()
    except BaseException:
        session.rollback()
        blobs.delete(key)
        raise
    return dataset


@router.post("", status_code=201, openapi_extra=UPLOAD_BODY, responses=problems({
    InvalidInput: "The body is not a form with a 'file' part, or its name or resize is not valid.",
    DatasetRejected: "The file is not a dataset the service can use: `reason` says why.",
    Conflict: "The caller already has a dataset of that name.",
    PayloadTooLarge: "The file is larger than the service accepts.",
    QuotaExceeded: "The file does not fit in the caller's storage quota (`quota-storage`): `detail` says how much "
                   "to free.",
    InsufficientStorage: "The service's storage is full: nothing was kept; retry once space is freed.",
}))
async def upload_dataset(request: Request, response: Response, user: CurrentUser, session: SessionDep,
                         settings: SettingsDep, blobs: BlobsDep) -> DatasetOut:
    """Upload a labelled dataset; it is validated and profiled before it is accepted (422 says why not)."""
    session.close()  # no connection, and no place among the requests at work, while the body arrives
    async with outside(request.scope):
        received = await receive_file(request, blobs.staging_dir(), settings.max_upload_bytes)
    try:
        dataset = await to_thread.run_sync(_accept, session, blobs, settings, user, received)
    finally:
        received.discard()
    response.headers["Location"] = f"{request.url.path}/{dataset.id}"
    return DatasetOut.model_validate(dataset)


@router.get("")
def list_datasets(user: CurrentUser, session: SessionDep) -> list[DatasetOut]:
    """The user's datasets, newest first."""
    query = select(Dataset).where(Dataset.owner_id == user.id).order_by(Dataset.created_at.desc())
    return [DatasetOut.model_validate(d) for d in session.scalars(query)]


@router.get("/{dataset_id}", responses=problems(NO_DATASET))
def read_dataset(dataset_id: uuid.UUID, user: CurrentUser, session: SessionDep) -> DatasetOut:
    """One of the user's datasets, with its profile."""
    return DatasetOut.model_validate(owned_dataset(session, user, dataset_id))


@router.delete("/{dataset_id}", status_code=204, responses=problems(
    {**NO_DATASET, Conflict: "A queued or running job still uses the dataset."}))
def delete_dataset(dataset_id: uuid.UUID, user: CurrentUser, session: SessionDep, blobs: BlobsDep) -> None:
    """Delete a dataset and its file; finished jobs and their models stay. 409 while a job still uses it."""
    # The file goes first, then the row: when the blob store fails (503) the dataset is still there, whole, and the
    # request can be sent again; no file is ever left without its row. Only a database failure between the two
    # leaves a row whose file is gone, and sending the request again finishes it (deleting a missing blob is no
    # error).
    dataset = owned_dataset(session, user, dataset_id)
    active = select(func.count()).select_from(Job).where(Job.dataset_id == dataset.id, Job.state.not_in(TERMINAL))
    if (count := session.scalar(active) or 0) > 0:
        raise Conflict(f"{count} queued or running job(s) use this dataset; cancel them first")
    blobs.delete(dataset.blob_key)
    session.delete(dataset)
    session.commit()
