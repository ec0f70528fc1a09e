"""The explain task's work: answer one user's explanation request (store.explanations) with its model.

Idempotent: a request answered already is left as it is; one left running by a worker that died is answered again,
and only the first answer is kept. Bad input (an image that cannot be decoded, a method that cannot explain this
network) fails the request with the reason; the task itself does not fail.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.orm import Session, sessionmaker

from domain.errors import DatasetRejected, InvalidInput
from domain.ingest import Limits, decode_image
from domain.package import image_shape, resize_policy
from store import explanations
from store.db import session_scope
from store.models import TrainedModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Asked:
    """An explanation request as the worker answers it: the method, the input, and the model's parts."""

    method: str
    name: str
    text: str | None
    image: bytes | None
    spec: dict[str, Any]
    weights: bytes
    variant: str
    preprocessing: dict[str, Any]
    classes: list[str]


def run_explanation(factory: sessionmaker[Session], explanation_id: uuid.UUID) -> str:
    """Answer the request `explanation_id`; return its state ('missing' when there is no such request)."""
    with session_scope(factory) as session:
        asked = _start(session, explanation_id)
    if isinstance(asked, str):
        return asked
    try:
        attribution, overlay = answer(asked)
    except (InvalidInput, DatasetRejected, ValueError) as exc:
        reason = exc.reason if isinstance(exc, DatasetRejected) else "invalid-input"
        return _fail(factory, explanation_id, reason, str(exc))
    except SoftTimeLimitExceeded:
        return _fail(factory, explanation_id, "time-limit", "the explanation ran past its task's time limit")
    except Exception:
        log.exception("explanation %s failed", explanation_id)
        return _fail(factory, explanation_id, "internal-error", "the worker hit an unexpected error")
    with session_scope(factory) as session:
        explanations.finish_explanation(session, explanation_id, attribution, overlay)
        return _state(session, explanation_id)


def _start(session: Session, explanation_id: uuid.UUID) -> Asked | str:
    """The request, now running; or its state when there is nothing to do."""
    row = explanations.start_explanation(session, explanation_id)
    if row is None:
        return _state(session, explanation_id)
    model = session.get_one(TrainedModel, row.model_id)
    return Asked(method=row.method, name=row.input, text=row.text,
                 image=bytes(row.image) if row.image is not None else None, spec=dict(model.spec),
                 weights=bytes(model.weights), variant=model.variant, preprocessing=dict(model.preprocessing),
                 classes=list(model.classes))


def _state(session: Session, explanation_id: uuid.UUID) -> str:
    row = explanations.find_explanation(session, explanation_id)
    return "missing" if row is None else row.state.value


def _fail(factory: sessionmaker[Session], explanation_id: uuid.UUID, reason: str, error: str) -> str:
    with session_scope(factory) as session:
        explanations.fail_explanation(session, explanation_id, reason, error)
        return _state(session, explanation_id)


def answer(asked: Asked) -> tuple[dict[str, Any], bytes | None]:
    """The attribution of the request's input (as `Attribution.to_dict()`) and, for an image, its PNG overlay."""
    from workers.attribution import explain, overlay_png, subject_of  # JAX loads here, in the pool process only

    subject = subject_of(asked.spec, asked.weights, asked.variant, asked.preprocessing)
    if asked.image is None:
        (attribution,) = explain(subject, asked.classes, asked.preprocessing, asked.method, [asked.name],
                                 texts=[asked.text or ""])
        return attribution.to_dict(), None
    shape = image_shape(asked.preprocessing)
    if shape is None:
        raise InvalidInput("this model takes texts, not images")
    pixels = decode_image(asked.image, shape, Limits(), name=asked.name, policy=resize_policy(asked.preprocessing))
    (attribution,) = explain(subject, asked.classes, asked.preprocessing, asked.method, [asked.name],
                             images=pixels[None])
    return attribution.to_dict(), overlay_png(pixels, attribution)
