"""`/models/{id}/predict`: class probabilities of real exported networks, as the engine computes them, with the
runner kept per model."""

from __future__ import annotations

import io
import uuid
from dataclasses import replace

import httpx
import numpy as np
import pytest
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker

from api.inference import SessionCache
from api.routes.models import MAX_INPUTS, MAX_PREDICT_BYTES
from domain.ingest import Limits, TextEncoder, decode_image
from domain.ingest.resize import fit_pixels
from tests.api.conftest import Account, assert_problem
from tests.api.model_inputs import files as _files
from tests.api.model_inputs import pixels as _pixels
from tests.api.model_inputs import png as _png
from tests.api.model_inputs import url as _url
from tests.nets import IMAGE_CLASSES, TEXT_CLASSES, Net, insert_model

pytestmark = pytest.mark.anyio


# ---- predict ---------------------------------------------------------------------------------------------------


async def test_predict_png_files_matches_core(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    model = insert_model(factory, account.user, image_net)
    pixels = _pixels(6)
    r = await client.post(_url(model.id, "/predict"), headers=account.auth,
                          files=_files([_png(p) for p in pixels]))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["classes"] == IMAGE_CLASSES
    expected = image_net.proba(pixels.astype(np.float32))
    got = np.array([p["probabilities"] for p in body["predictions"]])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [p["label"] for p in body["predictions"]] == [IMAGE_CLASSES[i] for i in expected.argmax(axis=1)]
    assert len({p["label"] for p in body["predictions"]}) > 1  # the check above can tell classes apart


async def test_predict_converts_and_resizes_images_as_ingest_does(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    model = insert_model(factory, account.user, image_net)
    rgb = _png(_pixels(1, (20, 12, 3), seed=3)[0])
    jpeg = io.BytesIO()
    Image.fromarray(_pixels(1, (8, 8, 3), seed=4)[0]).save(jpeg, format="JPEG")
    blobs = [rgb, jpeg.getvalue()]
    r = await client.post(_url(model.id, "/predict"), headers=account.auth, files=_files(blobs))
    assert r.status_code == 200, r.text
    decoded = np.stack([decode_image(b, (8, 8, 1), Limits()) for b in blobs]).astype(np.float32)
    got = np.array([p["probabilities"] for p in r.json()["predictions"]])
    np.testing.assert_allclose(got, image_net.proba(decoded), atol=1e-5)


async def test_predict_on_a_raw_image_of_another_size_matches_the_pre_resized_image(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    model = insert_model(factory, account.user, image_net)
    raw = _pixels(4, (40, 26, 1), seed=6)  # as a user would upload them: larger, another aspect ratio
    pre = fit_pixels(raw, (8, 8))  # what ingest makes of such images
    answers = []
    for pixels in (raw, pre):
        r = await client.post(_url(model.id, "/predict"), headers=account.auth, files=_files([_png(p) for p in pixels]))
        assert r.status_code == 200, r.text
        answers.append(np.array([p["probabilities"] for p in r.json()["predictions"]]))
    np.testing.assert_array_equal(answers[0], answers[1])
    np.testing.assert_allclose(answers[0], image_net.proba(pre.astype(np.float32)), atol=1e-5)


async def test_a_package_made_before_the_resize_policy_stretches_as_it_did(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    legacy = replace(image_net, preprocessing={"kind": "image", "shape": [8, 8, 1]})
    model = insert_model(factory, account.user, legacy)
    blob = _png(_pixels(1, (20, 12, 1), seed=3)[0])
    r = await client.post(_url(model.id, "/predict"), headers=account.auth, files=_files([blob]))
    assert r.status_code == 200, r.text
    stretched = decode_image(blob, (8, 8, 1), Limits(), policy="stretch").astype(np.float32)[None]
    np.testing.assert_allclose(r.json()["predictions"][0]["probabilities"], image_net.proba(stretched)[0],
                               atol=1e-5)


async def test_predict_texts_matches_core(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], text_net: Net,
) -> None:
    model = insert_model(factory, account.user, text_net)
    texts = ["a good film", "bad plot", "", "words never seen before", "GOOD good good acting"]
    r = await client.post(_url(model.id, "/predict"), headers=account.auth, json={"texts": texts})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["classes"] == TEXT_CLASSES
    encoder = TextEncoder.from_json(text_net.preprocessing["encoder"])
    expected = text_net.proba(encoder.encode(texts))
    got = np.array([p["probabilities"] for p in body["predictions"]])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [p["label"] for p in body["predictions"]] == [TEXT_CLASSES[i] for i in expected.argmax(axis=1)]


async def test_wrong_kind_of_input_is_422(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net, text_net: Net,
) -> None:
    image_model = insert_model(factory, account.user, image_net)
    text_model = insert_model(factory, account.user, text_net)
    r = await client.post(_url(image_model.id, "/predict"), headers=account.auth, json={"texts": ["hello"]})
    assert assert_problem(r, 422)["type"] == "urn:netsynth:problem:invalid-input"
    r = await client.post(_url(text_model.id, "/predict"), headers=account.auth, files=_files([_png(_pixels(1)[0])]))
    assert assert_problem(r, 422)["type"] == "urn:netsynth:problem:invalid-input"
    r = await client.post(_url(image_model.id, "/predict"), headers=account.auth,
                          files=_files([_png(_pixels(1)[0])]), data={"texts": "hello"})
    assert "texts" in str(assert_problem(r, 422)["detail"])


@pytest.mark.parametrize("content", [b"", b"--b--\r\n"])
async def test_no_images_is_422(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net, content: bytes,
) -> None:
    model = insert_model(factory, account.user, image_net)
    headers = {**account.auth, "Content-Type": "multipart/form-data; boundary=b"}
    r = await client.post(_url(model.id, "/predict"), headers=headers, content=content)
    assert_problem(r, 422)


async def test_no_texts_and_malformed_json_are_422(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], text_net: Net,
) -> None:
    model = insert_model(factory, account.user, text_net)
    url = _url(model.id, "/predict")
    r = await client.post(url, headers=account.auth, json={"texts": []})
    assert assert_problem(r, 422)["type"] == "urn:netsynth:problem:invalid-input"
    for bad in ({"texts": "one string"}, {"texts": [1, 2]}, {"text": ["x"]}, ["x"]):
        r = await client.post(url, headers=account.auth, json=bad)
        assert assert_problem(r, 422)["type"] == "urn:netsynth:problem:validation-error"
    r = await client.post(url, headers={**account.auth, "Content-Type": "application/json"}, content=b"{not json")
    assert assert_problem(r, 422)["type"] == "urn:netsynth:problem:validation-error"
    r = await client.post(url, headers={**account.auth, "Content-Type": "text/plain"}, content=b"a good film")
    assert assert_problem(r, 422)["type"] == "urn:netsynth:problem:invalid-input"


async def test_undecodable_image_is_422_naming_the_file(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    model = insert_model(factory, account.user, image_net)
    good = _png(_pixels(1)[0])
    for bad in (b"not an image at all", good[:40]):
        r = await client.post(_url(model.id, "/predict"), headers=account.auth, files=_files([good, bad]))
        body = assert_problem(r, 422)
        assert body["reason"] == "undecodable-image"
        assert "files[1]" in str(body["detail"])


async def test_too_many_inputs_is_413(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net, text_net: Net,
) -> None:
    image_model = insert_model(factory, account.user, image_net)
    text_model = insert_model(factory, account.user, text_net)
    r = await client.post(_url(text_model.id, "/predict"), headers=account.auth,
                          json={"texts": ["good"] * (MAX_INPUTS + 1)})
    assert assert_problem(r, 413)["type"] == "urn:netsynth:problem:payload-too-large"
    r = await client.post(_url(text_model.id, "/predict"), headers=account.auth, json={"texts": ["good"] * MAX_INPUTS})
    assert r.status_code == 200 and len(r.json()["predictions"]) == MAX_INPUTS
    png = _png(_pixels(1)[0])
    r = await client.post(_url(image_model.id, "/predict"), headers=account.auth,
                          files=_files([png] * (MAX_INPUTS + 1)))
    assert_problem(r, 413)
    r = await client.post(_url(image_model.id, "/predict"), headers=account.auth,
                          files=_files([png, b"\x00" * (MAX_PREDICT_BYTES + 1)]))
    assert_problem(r, 413)


async def test_openapi_documents_both_predict_bodies(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/api/v1/openapi.json")).json()
    body = doc["paths"]["/api/v1/models/{model_id}/predict"]["post"]["requestBody"]["content"]
    assert body["multipart/form-data"]["schema"]["properties"]["files"]["items"]["format"] == "binary"
    assert body["application/json"]["schema"]["properties"]["texts"]["type"] == "array"
    download = doc["paths"]["/api/v1/models/{model_id}/download"]["get"]
    assert {p["name"] for p in download["parameters"]} >= {"model_id", "format"}


# ---- the session cache ------------------------------------------------------------------------------------------


def test_session_cache_reuses_sessions_and_evicts_the_least_recently_used(image_net: Net) -> None:
    cache = SessionCache(size=2)
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    first = cache.runner(a, image_net.onnx)
    assert cache.runner(a, b"never read: a is cached") is first
    cache.runner(b, image_net.onnx)
    cache.runner(a, image_net.onnx)  # a is now the most recently used
    cache.runner(c, image_net.onnx)  # evicts b
    assert len(cache) == 2
    assert cache.runner(a, b"never read") is first
    with pytest.raises(ValueError, match="not a loadable ONNX model"):
        cache.runner(b, b"not onnx: b was evicted")
    x = _pixels(2).astype(np.float32)
    np.testing.assert_allclose(cache.probabilities(a, image_net.onnx, x), image_net.proba(x), atol=1e-5)
