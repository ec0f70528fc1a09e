"""The explain task's work in-process: a request answered with the real network of its model, once; bad input fails
the request with the reason, never the task."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta

import numpy as np
import pytest
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker

from store.base import utcnow
from store.db import session_scope
from store.explain_runs import Taken, claim
from store.explanations import answer_bytes, create_explanation, input_bytes
from store.models import ExplanationRequest, TrainedModel
from tests import nets
from tests.datasets import png_bytes
from tests.store.conftest import empty_db_url, engine, factory
from tests.store.factories import explanation_content
from workers.attribution import explain, subject_of
from workers.explanations import run_explanation

__all__ = ["empty_db_url", "engine", "factory"]  # the store's database fixtures: SQLite and PostgreSQL

PIXELS = np.random.default_rng(3).integers(0, 256, (8, 8, 1), dtype=np.uint8)


@pytest.fixture(scope="module")
def image_net() -> nets.Net:
    return nets.image_net()


@pytest.fixture(scope="module")
def text_net() -> nets.Net:
    return nets.text_net()


def _ask(factory: sessionmaker[Session], net: nets.Net, method: str, **given: object) -> tuple[TrainedModel, uuid.UUID]:
    model = nets.insert_model(factory, None, net)
    with session_scope(factory) as s:
        asked = create_explanation(s, model, method, **given)  # type: ignore[arg-type]
        return model, asked.id


def _content(factory: sessionmaker[Session], explanation_id: uuid.UUID) -> dict[str, object]:
    with factory() as s:
        return explanation_content(s.get_one(ExplanationRequest, explanation_id))


def test_a_text_is_explained_once_with_its_model(factory: sessionmaker[Session], text_net: nets.Net) -> None:
    _, asked = _ask(factory, text_net, "occlusion", text="a good film, good acting")
    assert run_explanation(factory, asked) == "done"
    content = _content(factory, asked)
    subject = subject_of(text_net.spec, text_net.weights, "dense", text_net.preprocessing)
    (want,) = explain(subject, text_net.classes, text_net.preprocessing, "occlusion", ["0"],
                      texts=["a good film, good acting"])
    assert content["attribution"] == want.to_dict()
    assert want.tokens == ["a", "good", "film,", "good", "acting"] and "overlay" not in content
    with factory() as s:  # metered: one attempt, its seconds, and the bytes of its input and answer
        row = s.get_one(ExplanationRequest, asked)
        assert (row.attempts, row.worker) == (1, None) and row.device_seconds > 0
        assert row.size_bytes == input_bytes(text="a good film, good acting") + answer_bytes(want.to_dict())
    assert run_explanation(factory, asked) == "done"  # a redelivered task: answered already, left as it is
    assert _content(factory, asked) == content


def test_an_image_is_explained_with_an_overlay(factory: sessionmaker[Session], image_net: nets.Net) -> None:
    _, asked = _ask(factory, image_net, "gradcam", image=png_bytes(PIXELS), name="ant.png")
    assert run_explanation(factory, asked) == "done"
    content = _content(factory, asked)
    attribution = content["attribution"]
    assert isinstance(attribution, dict) and attribution["input"] == "ant.png"
    assert attribution["method"] == "gradcam" and attribution["label"] in nets.IMAGE_CLASSES
    assert np.asarray(attribution["map"]).shape == (8, 8)
    with factory() as s:
        overlay = s.get_one(ExplanationRequest, asked).overlay
        assert overlay is not None
        assert Image.open(io.BytesIO(overlay)).format == "PNG"


@pytest.mark.parametrize(("net", "method", "given", "reason", "error"), [
    ("text", "gradcam", {"text": "a good film"}, "invalid-input", "does not explain text models"),
    ("image", "occlusion", {"image": b"not a png", "name": "x.png"}, "undecodable-image", "x.png"),
])
def test_bad_input_fails_the_request_with_the_reason(
    factory: sessionmaker[Session], image_net: nets.Net, text_net: nets.Net, net: str, method: str,
    given: dict[str, object], reason: str, error: str,
) -> None:
    _, asked = _ask(factory, text_net if net == "text" else image_net, method, **given)
    assert run_explanation(factory, asked) == "failed"
    content = _content(factory, asked)
    assert content["state"] == "failed" and content["reason"] == reason and error in str(content["error"])


def test_unreadable_weights_fail_the_request(factory: sessionmaker[Session], text_net: nets.Net) -> None:
    model, asked = _ask(factory, text_net, "occlusion", text="a film")
    with session_scope(factory) as s:
        s.get_one(TrainedModel, model.id).weights = b"not safetensors"
    assert run_explanation(factory, asked) == "failed"
    assert "cannot be read" in str(_content(factory, asked)["error"])


def test_a_request_that_is_gone_is_missing(factory: sessionmaker[Session]) -> None:
    assert run_explanation(factory, uuid.uuid4()) == "missing"


def test_a_copy_drops_while_a_live_worker_answers_and_the_last_attempt_is_not_run_again(
        factory: sessionmaker[Session], text_net: nets.Net) -> None:
    _, asked = _ask(factory, text_net, "occlusion", text="a film")
    with session_scope(factory) as s:
        assert claim(s, asked, "elsewhere:1:x", 60, 2) is Taken.CLAIMED  # another host's worker, beating
    assert run_explanation(factory, asked, max_attempts=2) == "busy"
    assert _content(factory, asked)["state"] == "running"
    with session_scope(factory) as s:  # that worker died a lease ago: this is the second and last attempt
        s.get_one(ExplanationRequest, asked).beat_at = utcnow() - timedelta(seconds=61)
    assert run_explanation(factory, asked, max_attempts=2) == "done"
    _, poison = _ask(factory, text_net, "occlusion", text="a film")
    for worker in ("a:1:x", "a:2:y"):  # two attempts whose processes died
        with session_scope(factory) as s:
            assert claim(s, poison, worker, 60, 2, lambda _worker: True) is Taken.CLAIMED
    with session_scope(factory) as s:  # the last one's heartbeat stopped a lease ago
        s.get_one(ExplanationRequest, poison).beat_at = utcnow() - timedelta(seconds=61)
    assert run_explanation(factory, poison, max_attempts=2) == "failed"
    assert _content(factory, poison)["reason"] == "worker-lost"
