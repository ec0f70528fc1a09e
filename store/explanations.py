"""A user's request to explain one input with one of their models: an `explanation_requests` row holding the
request (the method, and the text or the uploaded image) and, once a worker has answered it, the attribution (and an
image's overlay PNG) or why it failed.

States: queued (the API stored it and sent the task) → running (a worker took it: `store.explain_runs.claim`) →
done or failed. Only the first answer is kept. A worker that died leaves it running; the redelivered task or the
reaper runs it again, until its attempts are spent (`store.explain_runs`).

Its owner pays for it like for a job (`store.quotas`): `size_bytes` (the input, then the answer too) counts in their
storage, `device_seconds` in their device-seconds, and while pending it holds a place among their active
explanations. Deleting it (`erase_explanation`) drops its content and its bytes, and keeps what it cost in time.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from domain.errors import Conflict
from store.base import utcnow
from store.models import ExplanationRequest, ExplanationState, TrainedModel

__all__ = [
    "PENDING",
    "ExplanationState",
    "answer_bytes",
    "create_explanation",
    "erase_explanation",
    "fail_explanation",
    "find_explanation",
    "finish_explanation",
    "input_bytes",
]

PENDING = frozenset({ExplanationState.QUEUED, ExplanationState.RUNNING})


def input_bytes(text: str | None = None, image: bytes | None = None) -> int:
    """The bytes a request's input takes in the database: the image as uploaded, or the text as UTF-8."""
    return len(image) if image is not None else len((text or "").encode("utf-8"))


def answer_bytes(attribution: dict[str, Any] | None, overlay: bytes | None = None) -> int:
    """The bytes an answer takes in the database: its attribution as JSON (as the JSON column writes it), and the
    overlay PNG."""
    stored = 0 if attribution is None else len(json.dumps(attribution).encode("utf-8"))
    return stored + (len(overlay) if overlay is not None else 0)


def create_explanation(session: Session, model: TrainedModel, method: str, *, text: str | None = None,
                       image: bytes | None = None, name: str = "") -> ExplanationRequest:
    """Store a queued request to explain `text`, or the image `image` (its bytes as uploaded, called `name`), with
    `method`; the caller checks its owner's quotas first (`store.quotas.check_explanation`) and sends the task once
    this is committed."""
    if (text is None) == (image is None):
        raise ValueError("an explanation explains a text or an image")
    row = ExplanationRequest(job_id=model.job_id, model_id=model.id, state=ExplanationState.QUEUED, method=method,
                             input=name if image is not None else "0",  # a text is row 0, as in a CSV
                             text=text, image=image, size_bytes=input_bytes(text, image), device_seconds=0.0,
                             attempts=0)
    session.add(row)
    session.flush()
    return row


def find_explanation(session: Session, explanation_id: uuid.UUID, model_id: uuid.UUID | None = None,
                     *, lock: bool = False) -> ExplanationRequest | None:
    """The explanation request `explanation_id` (only if it is of `model_id`, when given; row-locked when `lock`);
    None when there is none, or its owner deleted it."""
    query = select(ExplanationRequest).where(ExplanationRequest.id == explanation_id,
                                             ExplanationRequest.erased_at.is_(None))
    if model_id is not None:
        query = query.where(ExplanationRequest.model_id == model_id)
    if lock:  # read the row as it is now, not as this session may have loaded it before
        query = query.with_for_update().execution_options(populate_existing=True)
    return session.scalars(query).first()


def _end(session: Session, explanation_id: uuid.UUID, state: ExplanationState, **answer: Any) -> bool:
    """Record the answer `answer` (column values) with `state`, its bytes added to the row's, and end its attempt;
    False when the request is gone or answered."""
    row = find_explanation(session, explanation_id, lock=True)
    if row is None or row.state not in PENDING:
        return False
    row.state = state
    for column, value in answer.items():
        setattr(row, column, value)
    row.size_bytes += answer_bytes(answer.get("attribution"), answer.get("overlay"))
    row.worker = row.beat_at = None
    return True


def finish_explanation(session: Session, explanation_id: uuid.UUID, attribution: dict[str, Any],
                       overlay: bytes | None = None) -> bool:
    """Record the attribution (and an image's overlay PNG); False when another answer came first."""
    return _end(session, explanation_id, ExplanationState.DONE, attribution=attribution, overlay=overlay)


def fail_explanation(session: Session, explanation_id: uuid.UUID, reason: str, error: str) -> bool:
    """Record why the request cannot be answered (`reason` a slug, `error` for people); False when another answer
    came first."""
    return _end(session, explanation_id, ExplanationState.FAILED, reason=reason, error=error)


def erase_explanation(session: Session, row: ExplanationRequest) -> None:
    """Delete an answered request for its owner: its input and answer go, and with them its bytes (of their storage
    quota); the row stays, hidden (`find_explanation` no longer finds it), so that the device-seconds it spent still
    count. One still queued or running is a Conflict: it holds a place among its owner's active explanations until a
    worker answers it."""
    if row.state in PENDING:
        raise Conflict(f"explanation {row.id} is {row.state.value}: delete it once it is answered (poll its URL)")
    row.text = row.image = row.attribution = row.overlay = None
    row.size_bytes = 0
    row.erased_at = utcnow()
