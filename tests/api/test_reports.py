"""`/models/{id}/report`: a model's explainability report, its images and its page, owner only; the native
download carries it under report/."""

from __future__ import annotations

import io
import json
import uuid
import zipfile

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from store.apikeys import create_api_key
from store.db import session_scope
from store.models import TrainedModel, User
from store.reports import save_report
from tests.api.conftest import Account, assert_problem
from tests.store.factories import make_job, make_user

pytestmark = pytest.mark.anyio

CONTENT = {"version": 1, "variant": "dense", "modality": "image", "classes": ["ant", "bee"],
           "suspect_labels": [{"row": 4, "given": "ant", "suggested": "bee", "score": 2.5}],
           "images": ["confusion.png", "row4_gradcam.png"]}
IMAGES = {"confusion.png": b"\x89PNG confusion", "row4_gradcam.png": b"\x89PNG row 4"}
PAGE = "<!doctype html><html><body><h1>netsynth report</h1></body></html>"


def _models(factory: sessionmaker[Session], owner: User, *, report: bool = True) -> list[TrainedModel]:
    """A job's dense and compressed models, each with its own report when `report`."""
    with session_scope(factory) as s:
        job = make_job(s, owner)
        models = [TrainedModel(job_id=job.id, variant=variant, spec={"name": variant}, weights=b"weights",
                               onnx=b"onnx", classes=["ant", "bee"], preprocessing={"kind": "image"}, metrics={},
                               param_count=1, weights_bytes=7) for variant in ("dense", "compressed")]
        s.add_all(models)
        s.flush()
        for model in models if report else []:
            save_report(s, job.id, model.id, {**CONTENT, "variant": model.variant}, IMAGES, PAGE)
    return models


def _url(model_id: uuid.UUID, suffix: str = "/report") -> str:
    return f"/api/v1/models/{model_id}{suffix}"


async def test_the_report_is_its_json_with_the_url_of_every_image(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session],
) -> None:
    _, small = _models(factory, account.user)
    r = await client.get(_url(small.id), headers=account.auth)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_id"] == str(small.id) and body["report"] == {**CONTENT, "variant": "compressed"}
    assert body["images"] == {name: _url(small.id, f"/report/images/{name}") for name in IMAGES}
    assert body["html"] == _url(small.id, "/report.html")
    for name, url in body["images"].items():
        image = await client.get(url, headers=account.auth)
        assert image.status_code == 200 and image.headers["content-type"] == "image/png"
        assert image.content == IMAGES[name]
    page = await client.get(body["html"], headers=account.auth)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.text == PAGE and "default-src 'none'" in page.headers["content-security-policy"]


@pytest.mark.parametrize("suffix", ["/report", "/report.html", "/report/images/confusion.png"])
async def test_a_model_without_a_report_says_so(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], suffix: str,
) -> None:
    dense, _ = _models(factory, account.user, report=False)
    body = assert_problem(await client.get(_url(dense.id, suffix), headers=account.auth), 404)
    assert body["reason"] == "report-absent" and body["type"] == "urn:netsynth:problem:not-found"


@pytest.mark.parametrize("name", ["missing.png", "report.html", "report.json"])
async def test_an_image_the_report_does_not_have_is_absent(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], name: str,
) -> None:
    dense, _ = _models(factory, account.user)
    body = assert_problem(await client.get(_url(dense.id, f"/report/images/{name}"), headers=account.auth), 404)
    assert body["reason"] == "image-absent"


@pytest.mark.parametrize("suffix", ["/report", "/report.html", "/report/images/confusion.png"])
async def test_another_users_report_answers_like_a_missing_model(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], suffix: str,
) -> None:
    with session_scope(factory) as s:
        bob = make_user(s)
        bob_key = {"Authorization": f"Bearer {create_api_key(s, bob).plaintext}"}
    dense, _ = _models(factory, account.user)
    answers = []
    for model_id in (dense.id, uuid.uuid4()):
        body = assert_problem(await client.get(_url(model_id, suffix), headers=bob_key), 404)
        assert body["detail"] == f"no model {model_id}" and "reason" not in body
        answers.append({k: v for k, v in body.items() if k not in {"detail", "instance"}})
    assert answers[0] == answers[1]
    assert_problem(await client.get(_url(dense.id, suffix)), 401)


async def test_the_native_download_of_both_variants_carries_its_report(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session],
) -> None:
    for model in _models(factory, account.user):
        r = await client.get(_url(model.id, "/download?format=native"), headers=account.auth)
        assert r.status_code == 200, r.text
        with zipfile.ZipFile(io.BytesIO(r.content)) as archive:
            files = {name: archive.read(name) for name in archive.namelist()}
        assert json.loads(files["report/report.json"]) == {**CONTENT, "variant": model.variant}
        assert files["report/report.html"] == PAGE.encode()
        assert {name: files[f"report/{name}"] for name in IMAGES} == IMAGES
    plain, _ = _models(factory, account.user, report=False)
    r = await client.get(_url(plain.id, "/download?format=native"), headers=account.auth)
    with zipfile.ZipFile(io.BytesIO(r.content)) as archive:
        assert not [name for name in archive.namelist() if name.startswith("report/")]
