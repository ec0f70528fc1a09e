"""`/models/{id}/explain`: explain one input (an image or a text) with a model on a worker, poll for the answer, and
delete it once answered.

The API checks the caller's quotas (`store.quotas.check_explanation`: active explanations, device-seconds, stored
bytes), stores the request and, once it is committed, sends the task `netsynth.explain` by name to the explain queue
(`Settings.explain_queue`), apart from the jobs'; the API never loads the engine. What it can tell without it is
refused at once (422): a method that does not explain this kind of model, an input of the other kind, an image that
cannot be decoded.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery
from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from python_multipart.multipart import parse_options_header
from sqlalchemy.orm import Session
from starlette.datastructures import UploadFile

from api.bodies import reads_body
from api.deps import CurrentUser, SenderDep, SessionDep, SettingsDep
from api.openapi import problems
from api.routes.datasets import checked_text
from api.routes.models import NO_MODEL, OwnedModel, model_router
from api.schemas.explanations import MAX_TEXT_CHARS, MODALITIES, ExplainTextIn, ExplanationOut, methods_for
from api.tasks import enqueue_explain
from api.upload import read_body, read_form, read_json
from domain.errors import Conflict, DatasetRejected, InvalidInput, NotFound, PayloadTooLarge, QuotaExceeded, Unavailable
from domain.ingest import Limits, decode_image
from domain.package import image_shape, resize_policy
from infra.settings import Settings
from store.explanations import (
    PENDING,
    create_explanation,
    erase_explanation,
    fail_explanation,
    find_explanation,
    input_bytes,
)
from store.models import ExplanationRequest, ExplanationState, TrainedModel, User
from store.quotas import check_explanation

router = model_router()

MAX_EXPLAIN_BYTES = 10 * 1024 * 1024
"""Most bytes an explain request's body may have."""
BROKER_DOWN = "the task broker did not answer; send the request again"
_FIELDS = ("file", "text", "method")
_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "multipart/form-data": {"schema": {
            "type": "object", "required": ["method"],
            "properties": {
                "file": {"type": "string", "format": "binary",
                         "description": "A PNG or JPEG image, for an image model."},
                "text": {"type": "string", "description": "A text, for a text model (instead of a file)."},
                "method": {"type": "string", "enum": sorted(MODALITIES)},
            },
        }},
        "application/json": {"schema": ExplainTextIn.model_json_schema()},
    },
}
NO_EXPLANATION = (f"{NO_MODEL} Or the model has no explanation request of this id"
                  " (`reason`: 'explanation-absent').")


@dataclass(frozen=True)
class _Input:
    """What a request asks: the method, and a text or an image's bytes with its file name."""

    method: str
    text: str | None = None
    image: bytes | None = None
    name: str = ""


@router.post("/{model_id}/explain", status_code=202, openapi_extra={"requestBody": _BODY}, responses={
    202: {"description": "Queued: poll `url` (also the Location header)."},
    **problems({
        InvalidInput: "The method does not explain this kind of model, the input is of the other kind or has no "
                      "words, or the form cannot be read.",
        DatasetRejected: "The image cannot be decoded.",
        PayloadTooLarge: f"A body over {MAX_EXPLAIN_BYTES} bytes.",
        Unavailable: "The task broker did not answer: the request was marked failed.",
        QuotaExceeded: "Too many queued or running explanations (`quota-active-explanations`), too few "
                       "device-seconds left for one (`quota-device-seconds`), or an input that does not fit in the "
                       "caller's storage (`quota-storage`): `detail` says what would free it. Nothing is stored.",
    }),
})
@reads_body(MAX_EXPLAIN_BYTES)  # received whole before the key and the model are looked up (api.bodies)
async def explain(model: OwnedModel, user: CurrentUser, session: SessionDep, sender: SenderDep,
                  settings: SettingsDep, request: Request, response: Response) -> ExplanationOut:
    """Explain one input with the model by `method`: an image as the multipart `file` (image models), or a text as
    the multipart field or JSON member `text` (text models). A worker answers it: poll the returned `url`."""
    kind = model.preprocessing["kind"]
    given = await _input(request)
    _check(given, kind)
    if given.image is not None:
        await run_in_threadpool(_decode, given.image, model.preprocessing)
    out = await run_in_threadpool(_store_and_send, session, sender, settings, user, model, given, request)
    response.headers["Location"] = out.url
    return out


@router.get("/{model_id}/explanations/{explanation_id}", responses={
    202: {"model": ExplanationOut, "description": "Still queued or running: poll again."},
    **problems({NotFound: NO_EXPLANATION}),
})
def read_explanation(model: OwnedModel, explanation_id: uuid.UUID, session: SessionDep, request: Request,
                     response: Response) -> ExplanationOut:
    """An explanation request: 202 while queued or running; 200 once done (the attribution, and for an image the
    URL of its overlay) or failed (why)."""
    found = _explanation(session, model, explanation_id)
    if found.state in PENDING:
        response.status_code = 202
    return _out(found, request)


@router.get("/{model_id}/explanations/{explanation_id}/overlay.png", response_class=Response, responses={
    200: {"content": {"image/png": {}}, "description": "The attribution drawn over the image."},
    **problems({NotFound: f"{NO_EXPLANATION} Or it has no overlay (yet): a text's, or one not done "
                          "(`reason`: 'image-absent')."}),
})
def explanation_overlay(model: OwnedModel, explanation_id: uuid.UUID, session: SessionDep) -> Response:
    """The PNG overlay of an explained image."""
    overlay = _explanation(session, model, explanation_id).overlay
    if overlay is None:
        raise NotFound(f"explanation {explanation_id} has no overlay", reason="image-absent")
    return Response(bytes(overlay), media_type="image/png")


@router.delete("/{model_id}/explanations/{explanation_id}", status_code=204, responses=problems({
    NotFound: NO_EXPLANATION,
    Conflict: "The request is still queued or running: delete it once it is answered.",
}))
def delete_explanation(model: OwnedModel, explanation_id: uuid.UUID, session: SessionDep) -> None:
    """Delete an answered (done or failed) explanation request: its input and answer, and with them their bytes of
    the caller's storage quota; the device-seconds it spent still count for 30 days. 409 while it is queued or
    running."""
    erase_explanation(session, _explanation(session, model, explanation_id, lock=True))
    session.commit()


def _explanation(session: Session, model: TrainedModel, explanation_id: uuid.UUID,
                 lock: bool = False) -> ExplanationRequest:
    found = find_explanation(session, explanation_id, model.id, lock=lock)
    if found is None:
        raise NotFound(f"model {model.id} has no explanation {explanation_id}", reason="explanation-absent")
    return found


def _out(row: ExplanationRequest, request: Request) -> ExplanationOut:
    ids = {"model_id": str(row.model_id), "explanation_id": str(row.id)}
    drawn = row.state is ExplanationState.DONE and row.overlay is not None  # only an answer has an overlay to load
    return ExplanationOut(
        id=row.id, model_id=row.model_id, created_at=row.created_at, state=row.state.value, method=row.method,
        url=request.app.url_path_for("read_explanation", **ids), attribution=row.attribution, reason=row.reason,
        error=row.error, overlay=request.app.url_path_for("explanation_overlay", **ids) if drawn else None)


async def _input(request: Request) -> _Input:
    """The method and the input of the request's body (a multipart form, or JSON for a text)."""
    media_type, _ = parse_options_header(request.headers.get("content-type", ""))
    if media_type not in (b"application/json", b"multipart/form-data"):
        raise InvalidInput("send multipart/form-data with a 'method' and an image 'file' or a 'text', or "
                           "application/json with a 'text' and a 'method'")
    body = await read_body(request, MAX_EXPLAIN_BYTES, "an explain request")
    if media_type == b"application/json":
        parsed = read_json(ExplainTextIn, body)
        return _Input(parsed.method, text=parsed.text)
    form = await read_form(request.headers, body, max_files=1, max_fields=len(_FIELDS))
    try:
        others = sorted(set(form.keys()) - set(_FIELDS))
        if others:
            raise InvalidInput(f"the form takes the fields {list(_FIELDS)}, not {others}")
        upload, text, method = (form.get(name) for name in _FIELDS)
        if not isinstance(method, str):
            raise InvalidInput("the form needs a 'method' field")
        if isinstance(upload, UploadFile) and text is None:
            name = checked_text(Path(upload.filename or "").name or "image", "a file name", 255)
            return _Input(method, image=await upload.read(), name=name)
        if isinstance(text, str) and upload is None:
            return _Input(method, text=checked_text(text, "the text", MAX_TEXT_CHARS))
        raise InvalidInput("send one input: an image as the 'file' part, or a 'text' field")
    finally:
        await form.close()


def _check(given: _Input, kind: str) -> None:
    """Refuse a method that does not explain `kind` models, and an input of the other kind."""
    if kind not in MODALITIES.get(given.method, ()):
        raise InvalidInput(f"{given.method!r} does not explain {kind} models; choose one of "
                           f"{', '.join(methods_for(kind))}")
    if kind == "image" and given.image is None:
        raise InvalidInput("this model takes images: send one as the form's 'file' part")
    if kind == "text" and given.text is None:
        raise InvalidInput("this model takes texts: send a 'text'")
    if given.text is not None and not given.text.split():
        raise InvalidInput("the text has no words to score")


def _decode(data: bytes, preprocessing: dict[str, Any]) -> None:
    """Refuse (DatasetRejected) an image the worker could not decode."""
    shape = image_shape(preprocessing)
    assert shape is not None  # image inputs reach image models only
    decode_image(data, shape, Limits(), name="the file", policy=resize_policy(preprocessing))


def _store_and_send(session: Session, sender: Celery, settings: Settings, user: User, model: TrainedModel,
                    given: _Input, request: Request) -> ExplanationOut:
    """Check the quotas, store the request, commit, then send its task; when the broker does not answer, mark it
    failed and raise."""
    check_explanation(session, user, settings, input_bytes(given.text, given.image))
    row = create_explanation(session, model, given.method, text=given.text, image=given.image, name=given.name)
    session.commit()  # the worker must find the row: send only after it is committed
    try:
        enqueue_explain(sender, str(row.id), settings.explain_queue)
    except Unavailable:
        fail_explanation(session, row.id, "broker-unavailable", BROKER_DOWN)
        session.commit()
        raise
    return _out(row, request)
