"""A user's request to explain one input with one of their models: a `reports` row of kind "explanation" whose
content holds the request and, once a worker has answered it, the attribution or why it failed; its images hold
the uploaded image (`input`) and the attribution's overlay (`overlay.png`).

States: queued (the API stored it and sent the task) → running (a worker took it) → done or failed. A worker
that died leaves it running; the task redelivered runs it again, and only the first answer is kept.
"""

from __future__ import annotations

import enum
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.models import Report, ReportImage, TrainedModel

EXPLANATION = "explanation"
"""The `reports.kind` of an explanation request."""
INPUT = "input"
"""The uploaded image's name among the request's images."""
OVERLAY = "overlay.png"
"""The attribution overlay's name among the request's images."""


class ExplanationState(enum.StrEnum):
    """Where an explanation request is."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


PENDING = frozenset({ExplanationState.QUEUED, ExplanationState.RUNNING})


def create_explanation(session: Session, model: TrainedModel, method: str, *, text: str | None = None,
                       image: bytes | None = None, name: str = "") -> Report:
    """Store a queued request to explain `text`, or the image `image` (its bytes as uploaded, called `name`), with
    `method`; the caller sends the task once this is committed."""
    if (text is None) == (image is None):
        raise ValueError("an explanation explains a text or an image")
    content: dict[str, Any] = {"state": ExplanationState.QUEUED.value, "method": method,
                               "input": name if image is not None else "0"}  # a text is row 0, as in a CSV
    files = []
    if text is not None:
        content["text"] = text
    else:
        files.append(ReportImage(name=INPUT, media_type="application/octet-stream", data=image))
    report = Report(job_id=model.job_id, model_id=model.id, kind=EXPLANATION, content=content, images=files)
    session.add(report)
    session.flush()
    return report


def find_explanation(session: Session, explanation_id: uuid.UUID, model_id: uuid.UUID | None = None,
                     *, lock: bool = False) -> Report | None:
    """The explanation request `explanation_id` (only if it is of `model_id`, when given; row-locked when `lock`)."""
    query = select(Report).where(Report.id == explanation_id, Report.kind == EXPLANATION)
    if model_id is not None:
        query = query.where(Report.model_id == model_id)
    return session.scalars(query.with_for_update() if lock else query).first()


def state(report: Report) -> ExplanationState:
    """The request's state."""
    return ExplanationState(report.content["state"])


def image(report: Report, name: str) -> ReportImage | None:
    """The request's image `name` (INPUT or OVERLAY), or None."""
    return next((found for found in report.images if found.name == name), None)


def start_explanation(session: Session, explanation_id: uuid.UUID) -> Report | None:
    """Mark the request running and return it; None when it is gone or already answered (nothing to do)."""
    report = find_explanation(session, explanation_id, lock=True)
    if report is None or state(report) not in PENDING:
        return None
    report.content = {**report.content, "state": ExplanationState.RUNNING.value}
    return report


def _end(session: Session, explanation_id: uuid.UUID, **content: Any) -> Report | None:
    report = find_explanation(session, explanation_id, lock=True)
    if report is None or state(report) not in PENDING:
        return None
    report.content = {**report.content, **content}
    return report


def finish_explanation(session: Session, explanation_id: uuid.UUID, attribution: dict[str, Any],
                       overlay: bytes | None = None) -> bool:
    """Record the attribution (and an image's overlay PNG); False when another answer came first."""
    extra = {"overlay": OVERLAY} if overlay is not None else {}
    report = _end(session, explanation_id, state=ExplanationState.DONE.value, attribution=attribution, **extra)
    if report is None:
        return False
    if overlay is not None:
        report.images.append(ReportImage(name=OVERLAY, media_type="image/png", data=overlay))
    return True


def fail_explanation(session: Session, explanation_id: uuid.UUID, reason: str, error: str) -> bool:
    """Record why the request cannot be answered (`reason` a slug, `error` for people); False when another answer
    came first."""
    return _end(session, explanation_id, state=ExplanationState.FAILED.value, reason=reason, error=error) is not None
