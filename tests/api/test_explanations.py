"""`/models/{id}/explain` and the poll URL it answers with: stored, sent by name after the commit, refused at once
when the API can tell (422), polled until a worker answers (here the store answers as a worker would)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, get_args

import httpx
import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker, undefer

from api.app import create_app
from api.routes.explanations import MAX_EXPLAIN_BYTES
from api.schemas.explanations import MODALITIES, MethodName
from infra.broker import EXPLAIN, filesystem_dir
from infra.settings import Settings
from store.apikeys import create_api_key
from store.db import session_scope
from store.explanations import fail_explanation, finish_explanation
from store.models import ExplanationRequest, Job, TrainedModel, User
from synthesis.explain import METHODS
from tests.api.conftest import Account, assert_problem
from tests.datasets import png_bytes
from tests.store.factories import explanation_content, make_model

pytestmark = pytest.mark.anyio

KINDS = {"image": {"kind": "image", "shape": [8, 8, 1], "resize": "centre-crop"}, "text": {"kind": "text"}}
PNG = png_bytes(np.arange(64, dtype=np.uint8).reshape(8, 8, 1))


def _model(factory: sessionmaker[Session], owner: User | None, kind: str) -> TrainedModel:
    with session_scope(factory) as s:
        model = make_model(s, owner, classes=["a", "b"], preprocessing=KINDS[kind])
    return model


def _url(model_id: uuid.UUID, suffix: str = "/explain") -> str:
    return f"/api/v1/models/{model_id}{suffix}"


def _messages(settings: Settings) -> list[dict[str, Any]]:
    folder = filesystem_dir(settings.broker_url)
    assert folder is not None
    return [json.loads(p.read_text()) for p in sorted(folder.resolve().glob("*.msg"))]


def _rows(factory: sessionmaker[Session]) -> list[ExplanationRequest]:
    with factory() as s:
        return list(s.scalars(select(ExplanationRequest).options(undefer(ExplanationRequest.image),
                                                                 undefer(ExplanationRequest.overlay))))


def test_the_apis_method_table_is_the_engines() -> None:
    assert {name: m.modalities for name, m in METHODS.items()} == MODALITIES
    assert set(get_args(MethodName)) == set(METHODS)


async def test_a_text_is_queued_sent_by_name_and_polled_until_answered(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], settings: Settings,
) -> None:
    model = _model(factory, account.user, "text")
    r = await client.post(_url(model.id), json={"text": "a good film", "method": "occlusion"}, headers=account.auth)
    assert r.status_code == 202, r.text
    body = r.json()
    poll = _url(model.id, f"/explanations/{body['id']}")
    assert r.headers["location"] == body["url"] == poll
    assert (body["state"], body["method"], body["attribution"], body["overlay"]) == ("queued", "occlusion", None, None)
    [message] = _messages(settings)
    assert message["headers"]["task"] == EXPLAIN
    assert message["headers"]["argsrepr"] == repr([body["id"]])
    # the explain queue, apart from the jobs' (the model's job's queue is the default one): never behind a job
    assert message["properties"]["delivery_info"]["routing_key"] == settings.explain_queue == "explain"
    assert settings.explain_queue != settings.default_queue
    [row] = _rows(factory)
    assert explanation_content(row) == {"state": "queued", "method": "occlusion", "input": "0", "text": "a good film"}

    r = await client.get(poll, headers=account.auth)
    assert r.status_code == 202 and r.json()["state"] == "queued"
    attribution = {"input": "0", "label": "b", "probability": 0.75, "method": "occlusion",
                   "tokens": ["a", "good", "film"], "scores": [0.0, 0.5, 0.1]}
    with session_scope(factory) as s:
        assert finish_explanation(s, row.id, attribution)
    r = await client.get(poll, headers=account.auth)
    assert r.status_code == 200
    assert (r.json()["state"], r.json()["attribution"], r.json()["overlay"]) == ("done", attribution, None)
    missing = assert_problem(await client.get(f"{poll}/overlay.png", headers=account.auth), 404)
    assert missing["reason"] == "image-absent"


async def test_an_image_is_kept_as_uploaded_and_its_overlay_served_once_done(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session],
) -> None:
    model = _model(factory, account.user, "image")
    r = await client.post(_url(model.id), files={"file": ("cat.png", PNG, "image/png")},
                          data={"method": "gradcam"}, headers=account.auth)
    assert r.status_code == 202, r.text
    body = r.json()
    with session_scope(factory) as s:
        row = s.get_one(ExplanationRequest, uuid.UUID(body["id"]))
        assert row.input == "cat.png" and row.image == PNG
        assert finish_explanation(s, row.id, {"input": "cat.png", "map": [[1.0] * 8] * 8}, b"\x89PNG overlay")
    done = (await client.get(body["url"], headers=account.auth)).json()
    assert done["state"] == "done" and done["overlay"] == f"{body['url']}/overlay.png"
    overlay = await client.get(done["overlay"], headers=account.auth)
    assert (overlay.status_code, overlay.headers["content-type"]) == (200, "image/png")
    assert overlay.content == b"\x89PNG overlay"


async def test_a_text_may_come_as_a_form_field_and_a_failure_says_why(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session],
) -> None:
    model = _model(factory, account.user, "text")
    r = await client.post(_url(model.id), files={"text": (None, "bad plot"), "method": (None, "smoothgrad")},
                          headers=account.auth)
    assert r.status_code == 202, r.text
    with session_scope(factory) as s:
        assert fail_explanation(s, uuid.UUID(r.json()["id"]), "invalid-input", "the encoder is malformed")
    failed = await client.get(r.json()["url"], headers=account.auth)
    assert failed.status_code == 200
    assert {k: failed.json()[k] for k in ("state", "reason", "error", "attribution")} == {
        "state": "failed", "reason": "invalid-input", "error": "the encoder is malformed", "attribution": None}


REFUSED = [
    ("text", {"json": {"text": "a good film", "method": "gradcam"}}, "invalid-input", "does not explain text"),
    ("text", {"json": {"text": "a film", "method": "shap"}}, "validation-error", "not valid"),
    ("text", {"json": {"text": "", "method": "occlusion"}}, "validation-error", "not valid"),
    ("text", {"json": {"text": "a\x00b", "method": "occlusion"}}, "validation-error", "not valid"),
    ("text", {"json": {"text": " \n ", "method": "occlusion"}}, "invalid-input", "no words"),
    ("text", {"files": {"text": (None, "film"), "method": (None, "shap")}}, "invalid-input", "'shap' does not"),
    ("text", {"files": {"file": ("a.png", PNG), "method": (None, "occlusion")}}, "invalid-input", "takes texts"),
    ("image", {"json": {"text": "a film", "method": "occlusion"}}, "invalid-input", "takes images"),
    ("image", {"files": {"file": ("a.png", b"not an image"), "method": (None, "occlusion")}},
     "dataset-rejected", "the file"),
    ("image", {"files": {"file": ("a.png", PNG)}}, "invalid-input", "needs a 'method'"),
    ("image", {"files": {"file": ("a.png", PNG), "text": (None, "x"), "method": (None, "occlusion")}},
     "invalid-input", "one input"),
    ("image", {"files": {"file": ("a.png", PNG), "method": (None, "gradcam"), "extra": (None, "1")}},
     "invalid-input", "not ['extra']"),
    ("image", {"content": b"method=gradcam", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
     "invalid-input", "send multipart/form-data"),
]


@pytest.mark.parametrize(("kind", "request_", "slug", "detail"), REFUSED)
async def test_what_the_api_can_tell_is_refused_at_once_and_nothing_is_sent(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], settings: Settings,
    kind: str, request_: dict[str, Any], slug: str, detail: str,
) -> None:
    model = _model(factory, account.user, kind)
    headers = {**request_.get("headers", {}), **account.auth}
    r = await client.post(_url(model.id), **{**request_, "headers": headers})
    body = assert_problem(r, 422)
    assert body["type"] == f"urn:netsynth:problem:{slug}" and detail in str(body["detail"]), body
    assert _rows(factory) == [] and _messages(settings) == []


async def test_a_body_over_the_limit_is_413(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session],
) -> None:
    model = _model(factory, account.user, "image")
    r = await client.post(_url(model.id), files={"file": ("a.png", b"\x00" * (MAX_EXPLAIN_BYTES + 1))},
                          data={"method": "gradcam"}, headers=account.auth)
    assert_problem(r, 413)


async def test_an_unreachable_broker_is_503_and_the_request_fails_instead_of_staying_queued(
    settings: Settings, account: Account, factory: sessionmaker[Session], tmp_path: Path,
) -> None:
    model = _model(factory, account.user, "text")
    app = create_app(settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"}))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.post(_url(model.id), json={"text": "a film", "method": "occlusion"}, headers=account.auth)
    app.state.engine.dispose()
    assert assert_problem(r, 503)["type"] == "urn:netsynth:problem:unavailable"
    [row] = _rows(factory)
    assert (row.state, row.reason) == ("failed", "broker-unavailable")


async def test_another_users_model_and_explanations_answer_like_missing_ones(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session],
) -> None:
    mine, theirs = _model(factory, account.user, "text"), _model(factory, None, "text")
    with session_scope(factory) as s:
        owner = s.get_one(User, s.get_one(Job, theirs.job_id).owner_id)
        owner_key = {"Authorization": f"Bearer {create_api_key(s, owner).plaintext}"}
    asked = (await client.post(_url(theirs.id), json={"text": "a film", "method": "occlusion"},
                               headers=owner_key)).json()
    for path in ("/explain", f"/explanations/{asked['id']}", f"/explanations/{asked['id']}/overlay.png"):
        method = "POST" if path == "/explain" else "GET"
        body = assert_problem(await client.request(method, _url(theirs.id, path), headers=account.auth,
                                                   json={"text": "a film", "method": "occlusion"}), 404)
        assert body["detail"] == f"no model {theirs.id}"
        assert_problem(await client.request(method, _url(theirs.id, path)), 401)
    # their explanation under the caller's own model: that model has no such explanation
    body = assert_problem(await client.get(_url(mine.id, f"/explanations/{asked['id']}"), headers=account.auth), 404)
    assert body["reason"] == "explanation-absent"
