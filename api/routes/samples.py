"""`/datasets/{id}/samples`: a few samples of one of the caller's datasets to look at, and each image sample as the
model sees it (a PNG thumbnail), read from the stored file as it streams (`domain.ingest.samples`): through the blob
store's seekable reader, so that on S3 only the ranges read are fetched (the archive's directory and one image), not
the dataset."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, BinaryIO

from fastapi import APIRouter, Query, Request, Response
from fastapi import Path as PathParam

from api.deps import CurrentUser, SessionDep
from api.openapi import ProblemRoute, problems
from api.routes.datasets import NO_DATASET, BlobsDep, owned_dataset
from api.schemas.datasets import DatasetSamplesOut, SampleOut
from domain.errors import NotFound
from domain.ingest.samples import pick_samples, sample_pixels, thumbnail_png
from store.blobs import BlobStore
from store.models import Dataset, Modality

router = APIRouter(route_class=ProblemRoute, prefix="/datasets", tags=["datasets"])
NO_FILE: dict[type[Exception], str] = {
    NotFound: f"{NO_DATASET[NotFound]} Or its file is missing from the blob store (`reason`: 'file-absent')."}

PNG = "image/png"
MAX_SAMPLES = 64
MAX_INDEX = 2**31 - 1
SAMPLE_CACHE = "private, max-age=3600"
"""A sample's PNG never changes (a dataset is never modified), so the browser may keep it for an hour."""


@contextmanager
def _file(blobs: BlobStore, dataset: Dataset) -> Iterator[BinaryIO]:
    """A seekable reader of the dataset's file; NotFound (without the blob's key) when the blob store has lost it."""
    try:
        stream = blobs.open(dataset.blob_key)
    except NotFound:
        raise NotFound(f"the file of dataset {dataset.id} is missing", reason="file-absent") from None
    with stream:
        yield stream


@router.get("/{dataset_id}/samples", responses=problems(NO_FILE))
def list_samples(dataset_id: uuid.UUID, user: CurrentUser, session: SessionDep, blobs: BlobsDep, request: Request,
                 limit: Annotated[int, Query(ge=1, le=MAX_SAMPLES)] = 12) -> DatasetSamplesOut:
    """Up to `limit` samples of the dataset, spread over its classes: the first rows of each class, one class after
    the other in turn (the same ones at every call)."""
    dataset = owned_dataset(session, user, dataset_id)
    with _file(blobs, dataset) as file:
        picked = pick_samples(file, dataset.format, dataset.classes, dataset.class_counts, limit)
    image = dataset.modality is Modality.IMAGE
    return DatasetSamplesOut(modality="image" if image else "text", samples=[SampleOut(
        index=sample.index, label=sample.label, text=sample.text, image_url=request.app.url_path_for(
            "sample_image", dataset_id=str(dataset.id), index=str(sample.index)) if image else None)
        for sample in picked])


@router.get("/{dataset_id}/samples/{index}.png", response_class=Response, responses={
    200: {"content": {PNG: {}}, "description": "The image as the model sees it, at most 128 pixels a side."},
    **problems({NotFound: f"{NO_FILE[NotFound]} Or it has no image of this index (`reason`: 'sample-absent')."}),
})
def sample_image(dataset_id: uuid.UUID, index: Annotated[int, PathParam(ge=0, le=MAX_INDEX)], user: CurrentUser,
                 session: SessionDep, blobs: BlobsDep) -> Response:
    """The image sample of row `index`, brought to the dataset's size as the model sees it, as a PNG."""
    dataset = owned_dataset(session, user, dataset_id)
    profile = dataset.profile.get("image")
    pixels = None
    if dataset.modality is Modality.IMAGE and isinstance(profile, dict) and index < dataset.sample_count:
        shape = (int(profile["height"]), int(profile["width"]), int(profile["channels"]))
        with _file(blobs, dataset) as file:
            pixels = sample_pixels(file, dataset.format, index, shape)
    if pixels is None:
        raise NotFound(f"dataset {dataset.id} has no image sample {index}", reason="sample-absent")
    return Response(thumbnail_png(pixels), media_type=PNG, headers={"Cache-Control": SAMPLE_CACHE})
