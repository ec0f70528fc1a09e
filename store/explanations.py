"""A user's request to explain one input with one of their models: an `explanation_requests` row holding the
request (the method, and the text or the uploaded image) and, once a worker has answered it, the attribution (and an
image's overlay PNG) or why it failed.

States: queued (the API stored it and sent the task) → running (a worker took it) → done or failed. A worker
that died leaves it running; the task redelivered runs it again, and only the first answer is kept.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.models import ExplanationRequest, ExplanationState, TrainedModel

__all__ = [
    "PENDING",
    "ExplanationState",
    "create_explanation",
    "fail_explanation",
    "find_explanation",
    "finish_explanation",
    "start_explanation",
]

PENDING = frozenset({ExplanationState.QUEUED, ExplanationState.RUNNING})


def create_explanation(session: Session, model: TrainedModel, method: str, *, text: str | None = None,
                       image: bytes | None = None, name: str = "") -> ExplanationRequest:
    """Store a queued request to explain `text`, or the image `image` (its bytes as uploaded, called `name`), with
    `method`; the caller sends the task once this is committed."""
    if (text is None) == (image is None):
        raise ValueError("an explanation explains a text or an image")
    row = ExplanationRequest(job_id=model.job_id, model_id=model.id, state=ExplanationState.QUEUED, method=method,
                             input=name if image is not None else "0",  # a text is row 0, as in a CSV
                             text=text, image=image)
    session.add(row)
    session.flush()
    return row


def find_explanation(session: Session, explanation_id: uuid.UUID, model_id: uuid.UUID | None = None,
                     *, lock: bool = False) -> ExplanationRequest | None:
    """The explanation request `explanation_id` (only if it is of `model_id`, when given; row-locked when `lock`)."""
    query = select(ExplanationRequest).where(ExplanationRequest.id == explanation_id)
    if model_id is not None:
        query = query.where(ExplanationRequest.model_id == model_id)
    return session.scalars(query.with_for_update() if lock else query).first()


def start_explanation(session: Session, explanation_id: uuid.UUID) -> ExplanationRequest | None:
    """Mark the request running and return it; None when it is gone or already answered (nothing to do)."""
    row = find_explanation(session, explanation_id, lock=True)
    if row is None or row.state not in PENDING:
        return None
    row.state = ExplanationState.RUNNING
    return row


def _end(session: Session, explanation_id: uuid.UUID, state: ExplanationState, **answer: Any) -> bool:
    """Record the answer `answer` (column values) with `state`; False when the request is gone or answered."""
    row = find_explanation(session, explanation_id, lock=True)
    if row is None or row.state not in PENDING:
        return False
    row.state = state
    for column, value in answer.items():
        setattr(row, column, value)
    return True


def finish_explanation(session: Session, explanation_id: uuid.UUID, attribution: dict[str, Any],
                       overlay: bytes | None = None) -> bool:
    """Record the attribution (and an image's overlay PNG); False when another answer came first."""
    return _end(session, explanation_id, ExplanationState.DONE, attribution=attribution, overlay=overlay)


def fail_explanation(session: Session, explanation_id: uuid.UUID, reason: str, error: str) -> bool:
    """Record why the request cannot be answered (`reason` a slug, `error` for people); False when another answer
    came first."""
    return _end(session, explanation_id, ExplanationState.FAILED, reason=reason, error=error)
