"""The explain task's work: answer one user's explanation request (store.explanations) with its model.

The request is claimed first (`store.explain_runs.claim`: its next attempt, or nothing to do when it is answered,
held by a live worker, or out of attempts); while it is answered a heartbeat thread says the worker lives and charges
the seconds spent to the request's device-seconds, the rest charged with the answer. Only the first answer is kept.
Bad input (an image that cannot be decoded, a method that cannot explain this network) fails the request with the
reason; the task itself does not fail.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.orm import Session, sessionmaker

from domain.errors import DatasetRejected, InvalidInput
from domain.ingest import Limits, decode_image
from domain.package import image_shape, resize_policy
from store import explanations
from store.db import session_scope
from store.explain_runs import TIME_LIMIT, Taken, beat, charge, claim
from store.models import TrainedModel
from workers.context import holder_dead, worker_identity

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


@dataclass(frozen=True)
class Failure:
    """Why a request cannot be answered: `reason` a slug, `error` for people."""

    reason: str
    error: str


class Heartbeat:
    """While a request is answered: every third of `lease_s`, say its worker lives and charge the seconds spent
    since the last charge (`take` hands the rest to the answer's transaction)."""

    def __init__(self, factory: sessionmaker[Session], explanation_id: uuid.UUID, owner: str, lease_s: float) -> None:
        self.factory, self.explanation_id, self.owner, self.lease_s = factory, explanation_id, owner, lease_s
        self._charged = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"explain-{explanation_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def take(self) -> float:
        """The seconds spent since the last charge (now charged by the caller)."""
        with self._lock:
            now = time.monotonic()
            seconds, self._charged = now - self._charged, now
            return seconds

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                with session_scope(self.factory) as session:
                    beat(session, self.explanation_id, self.owner, self.take())
            except Exception:  # a database hiccup: the next beat tries again (its seconds are lost, not doubled)
                log.exception("explanation %s: heartbeat failed", self.explanation_id)


def run_explanation(factory: sessionmaker[Session], explanation_id: uuid.UUID, *, owner: str | None = None,
                    lease_s: float = 60.0, max_attempts: int = 3) -> str:
    """Answer the request `explanation_id` as `owner` (this process, by default); return its state, or what the
    claim found when there was nothing to do ('missing', 'busy')."""
    owner = owner or worker_identity()
    with session_scope(factory) as session:
        taken = claim(session, explanation_id, owner, lease_s, max_attempts, holder_dead)
        if taken is not Taken.CLAIMED:
            return _state(session, explanation_id) if taken in (Taken.ANSWERED, Taken.FAILED) else taken.value
        asked = _asked(session, explanation_id)
    with Heartbeat(factory, explanation_id, owner, lease_s) as meter:
        answered = _answer_or_why(explanation_id, asked)
    with session_scope(factory) as session:
        charge(session, explanation_id, meter.take())
        if isinstance(answered, Failure):
            explanations.fail_explanation(session, explanation_id, answered.reason, answered.error)
        else:
            explanations.finish_explanation(session, explanation_id, *answered)
        return _state(session, explanation_id)


def _answer_or_why(explanation_id: uuid.UUID, asked: Asked) -> tuple[dict[str, Any], bytes | None] | Failure:
    """The attribution and overlay, or why the request fails."""
    try:
        return answer(asked)
    except (InvalidInput, DatasetRejected, ValueError) as exc:
        return Failure(exc.reason if isinstance(exc, DatasetRejected) else "invalid-input", str(exc))
    except SoftTimeLimitExceeded:
        return Failure(TIME_LIMIT, "the explanation ran past its task's time limit")
    except Exception:
        log.exception("explanation %s failed", explanation_id)
        return Failure("internal-error", "the worker hit an unexpected error")


def _asked(session: Session, explanation_id: uuid.UUID) -> Asked:
    """The claimed request, with its model's parts."""
    row = explanations.find_explanation(session, explanation_id)
    assert row is not None  # claimed in this transaction
    model = session.get_one(TrainedModel, row.model_id)
    return Asked(method=row.method, name=row.input, text=row.text,
                 image=bytes(row.image) if row.image is not None else None, spec=dict(model.spec),
                 weights=bytes(model.weights), variant=model.variant, preprocessing=dict(model.preprocessing),
                 classes=list(model.classes))


def _state(session: Session, explanation_id: uuid.UUID) -> str:
    row = explanations.find_explanation(session, explanation_id)
    return "missing" if row is None else row.state.value


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
