"""`/models`: a trained model's description, its downloads (ONNX or a native zip) and predictions with it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from python_multipart.multipart import parse_options_header
from sqlalchemy import select
from starlette.datastructures import Headers, UploadFile

from api.bodies import reads_body
from api.deps import CurrentUser, SessionDep
from api.inference import SESSIONS
from api.openapi import ProblemRoute, problems
from api.package import native_package
from api.schemas.models import ArchitectureOut, ExportFormat, ModelOut, Prediction, PredictOut, TextsIn
from api.upload import read_body, read_form, read_json
from domain.errors import DatasetRejected, InvalidInput, NotFound, PayloadTooLarge
from domain.ingest import Limits, decode_image
from domain.package import image_shape, network_input, resize_policy
from store.models import Job, TrainedModel
from store.reports import report_files

NO_MODEL = "No model of the caller's jobs has this id."


def model_router() -> APIRouter:
    """A router of `/models/{model_id}` routes, each of which answers 404 for a model that is not the caller's."""
    return APIRouter(route_class=ProblemRoute, prefix="/models", tags=["models"],
                     responses=problems({NotFound: NO_MODEL}))


router = model_router()

MAX_INPUTS = 256
"""Most inputs (files or texts) one predict request may carry."""
MAX_PREDICT_BYTES = 20 * 1024 * 1024
"""Most bytes a predict request's body may have."""

_PREDICT_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "multipart/form-data": {"schema": {
            "type": "object", "required": ["files"],
            "properties": {"files": {"type": "array", "items": {"type": "string", "format": "binary"},
                                     "description": "PNG or JPEG images, for an image model."}},
        }},
        "application/json": {"schema": TextsIn.model_json_schema()},
    },
}


def owned_model(model_id: uuid.UUID, user: CurrentUser, session: SessionDep) -> TrainedModel:
    """The model `model_id` if the user's job made it; NotFound otherwise, whether it is missing or not theirs."""
    row = session.execute(
        select(TrainedModel, Job).join(Job, Job.id == TrainedModel.job_id)
        .where(TrainedModel.id == model_id, Job.owner_id == user.id)
    ).first()
    if row is None:
        raise NotFound(f"no model {model_id}")
    return row[0]


OwnedModel = Annotated[TrainedModel, Depends(owned_model)]


@router.get("/{model_id}")
def read_model(model: OwnedModel, session: SessionDep) -> ModelOut:
    """Describe a trained model: variant, classes, metrics, size, the input it takes, its layers and, for a
    compressed model, the compression's before / after figures."""
    job = session.get_one(Job, model.job_id)
    return ModelOut(
        id=model.id, job_id=model.job_id, dataset_id=job.dataset_id, variant=model.variant,
        created_at=model.created_at, classes=model.classes, metrics=model.metrics, param_count=model.param_count,
        weights_bytes=model.weights_bytes, onnx_bytes=len(model.onnx), input=model.spec.get("input", {}),
        preprocessing=model.preprocessing["kind"], compression=_compression(model),
        architecture=None if model.architecture is None else ArchitectureOut.model_validate(model.architecture),
    )


COMPRESSION_KEYS = ("tolerance", "val_accuracy_before", "val_accuracy_after", "ratio", "before", "after", "bits",
                    "kept_fraction", "stop_reason")
"""The keys of a compressed model's metrics that make its before / after figures."""


def _compression(model: TrainedModel) -> dict[str, Any] | None:
    if model.variant != "compressed":
        return None
    return {k: model.metrics[k] for k in COMPRESSION_KEYS if k in model.metrics}


@router.get(
    "/{model_id}/download",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}, "application/zip": {}},
                     "description": "The ONNX graph, or the native zip."}},
)
def download_model(
    model: OwnedModel, session: SessionDep, fmt: Annotated[ExportFormat, Query(alias="format")] = ExportFormat.ONNX,
) -> Response:
    """Download the model as ONNX (`format=onnx`), or as a zip of spec, weights (the compressed artifact
    `model.nsz` for a compressed model), ONNX, labels, metrics and its explainability report (report/)."""
    stem = f"netsynth-model-{model.id.hex[:8]}" + ("" if model.variant == "dense" else f"-{model.variant}")
    if fmt is ExportFormat.ONNX:
        content, media_type, filename = bytes(model.onnx), "application/octet-stream", f"{stem}.onnx"
    else:
        content, media_type, filename = (native_package(model, report_files(session, model.id)), "application/zip",
                                         f"{stem}.zip")
    return Response(content, media_type=media_type,
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


@router.post("/{model_id}/predict", openapi_extra={"requestBody": _PREDICT_BODY}, responses=problems({
    InvalidInput: "The inputs are not of the model's kind, none were sent, or the form cannot be read.",
    DatasetRejected: "An image cannot be decoded: the detail names the file.",
    PayloadTooLarge: f"More than {MAX_INPUTS} inputs, or a body over {MAX_PREDICT_BYTES} bytes.",
}))
@reads_body(MAX_PREDICT_BYTES)  # received whole before the key and the model are looked up (api.bodies)
async def predict(model: OwnedModel, request: Request) -> PredictOut:
    """Classify up to 256 inputs (20 MB in all): image files as multipart `files` for an image model, or
    JSON `{"texts": [...]}` for a text model."""
    media_type, options = parse_options_header(request.headers.get("content-type", ""))
    kind = model.preprocessing["kind"]
    if media_type == b"multipart/form-data":
        if kind != "image":
            raise InvalidInput(f"this model takes {kind} input, not image files")
        body = await read_body(request, MAX_PREDICT_BYTES, "a predict request")
        files = await _files(request.headers, options.get(b"boundary", b""), body)
        batch = await run_in_threadpool(_pixels, files, model.preprocessing)
    elif media_type == b"application/json":
        if kind != "text":
            raise InvalidInput(f"this model takes {kind} input, not texts")
        texts = _texts(await read_body(request, MAX_PREDICT_BYTES, "a predict request"))
        batch = await run_in_threadpool(_token_ids, texts, model.preprocessing)
    else:
        raise InvalidInput("send multipart/form-data with image 'files', or application/json with 'texts'")
    proba = await run_in_threadpool(SESSIONS.probabilities, model.id, model.onnx, batch)
    classes = list(model.classes)
    return PredictOut(classes=classes, predictions=[
        Prediction(label=classes[int(np.argmax(row))], probabilities=row.tolist()) for row in proba])


def _check_count(count: int) -> None:
    if count > MAX_INPUTS:
        raise PayloadTooLarge(f"a predict request may carry at most {MAX_INPUTS} inputs, this one has {count}")
    if count < 1:
        raise InvalidInput("the request carries no inputs")


async def _files(headers: Headers, boundary: bytes, body: bytes) -> list[bytes]:
    """The contents of the multipart body's `files` fields; InvalidInput for any other field or a bad body."""
    if boundary:
        _check_count(body.count(b"--" + boundary) - 1)  # every part opens with the boundary, and one more ends them
    form = await read_form(headers, body, max_files=MAX_INPUTS, max_fields=MAX_INPUTS)
    try:
        others = sorted({name for name, value in form.multi_items()
                         if name != "files" or not isinstance(value, UploadFile)})
        if others:
            raise InvalidInput(f"an image model takes only file fields named 'files', not {others}")
        uploads = [value for value in form.getlist("files") if isinstance(value, UploadFile)]
        _check_count(len(uploads))
        return [await upload.read() for upload in uploads]
    finally:
        await form.close()


def _pixels(files: Sequence[bytes], preprocessing: dict[str, Any]) -> np.ndarray:
    """Decoded images as the network's input, float32 [N, H, W, C] raw pixel values, each brought to the model's
    size by its resize policy; DatasetRejected names the file at fault."""
    shape = image_shape(preprocessing)
    assert shape is not None  # the route sends files to image models only
    policy = resize_policy(preprocessing)
    images = [decode_image(data, shape, Limits(), name=f"files[{index}]", policy=policy)
              for index, data in enumerate(files)]
    return network_input(preprocessing, images=images)


def _texts(body: bytes) -> list[str]:
    """The texts of a JSON body; a RequestValidationError when it is not `{"texts": [str, ...]}`."""
    texts = read_json(TextsIn, body).texts
    _check_count(len(texts))
    return texts


def _token_ids(texts: Sequence[str], preprocessing: dict[str, Any]) -> np.ndarray:
    """The texts as the network's input, int32 [N, L] token ids from the model's encoder."""
    return network_input(preprocessing, texts=texts)
