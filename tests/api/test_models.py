"""`/models`: describe and download (ONNX or a native zip) real exported networks, owner only."""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from typing import Any

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from sqlalchemy.orm import Session, sessionmaker

from api.package import native_package
from core import artifact, checkpoint, tree
from core.evaluation import predict_proba
from core.model import build
from core.spec import Spec
from store.db import session_scope
from store.models import Job, TrainedModel
from tests.api.conftest import Account, assert_problem
from tests.api.model_inputs import files as _files
from tests.api.model_inputs import pixels as _pixels
from tests.api.model_inputs import png as _png
from tests.api.model_inputs import url as _url
from tests.nets import IMAGE_CLASSES, TEXT_CLASSES, Net, insert_model, model_row
from tests.store.factories import make_job

pytestmark = pytest.mark.anyio



# ---- GET /models/{id} ----------------------------------------------------------------------------------------


async def test_detail_describes_an_image_model(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    model = insert_model(factory, account.user, image_net)
    r = await client.get(_url(model.id), headers=account.auth)
    assert r.status_code == 200, r.text
    body = r.json()
    with factory() as s:
        job = s.get_one(Job, model.job_id)
    assert body["id"] == str(model.id)
    assert body["job_id"] == str(job.id)
    assert body["dataset_id"] == str(job.dataset_id)
    assert body["variant"] == "dense"
    assert body["created_at"].startswith(str(model.created_at.year))
    assert body["classes"] == IMAGE_CLASSES
    assert body["metrics"] == {"accuracy": 0.875, "loss": 0.4}
    assert (body["param_count"], body["weights_bytes"]) == (123, len(image_net.weights))
    assert body["onnx_bytes"] == len(image_net.onnx)
    assert body["input"] == image_net.spec["input"]
    assert body["input"]["shape"] == [8, 8, 1]
    assert body["preprocessing"] == "image"


async def test_detail_describes_the_architecture_layer_by_layer(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    model = insert_model(factory, account.user, image_net)
    architecture = (await client.get(_url(model.id), headers=account.auth)).json()["architecture"]
    assert architecture["input_shape"] == image_net.spec["input"]["shape"] == [8, 8, 1]
    layers = architecture["layers"]
    assert [(layer["name"], layer["op"]) for layer in layers] == [
        ("conv", "conv2d"), ("relu", "activation"), ("pool", "global_avg_pool"), ("logits", "dense")]
    assert [layer["inputs"] for layer in layers] == [["input"], ["conv"], ["relu"], ["pool"]]
    assert layers[-1]["output_shape"] == [len(IMAGE_CLASSES)]
    assert [layer["params"] for layer in layers] == [3 * 3 * 1 * 4 + 4, 0, 0, 4 * 3 + 3]
    counted = sum(int(np.size(a)) for a in tree.flatten(image_net.variables["params"]).values())
    assert sum(layer["params"] for layer in layers) == counted
    # every shape as the exported ONNX graph computes it (its tensors carry the layers' names, with a batch axis)
    inferred = onnx.shape_inference.infer_shapes(onnx.load_from_string(image_net.onnx), strict_mode=True).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim][1:] for v in inferred.value_info}
    assert {layer["name"]: layer["output_shape"] for layer in layers if layer["name"] in shapes} == {
        "conv": [8, 8, 4], "relu": [8, 8, 4], "pool": [4]}


async def test_a_model_saved_before_architectures_were_recorded_has_none(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], text_net: Net,
) -> None:
    model = insert_model(factory, account.user, text_net)
    layers = (await client.get(_url(model.id), headers=account.auth)).json()["architecture"]["layers"]
    assert layers[0]["output_shape"] == [8, 4]  # the embedding: one 4-d vector per token
    with session_scope(factory) as s:
        s.get_one(TrainedModel, model.id).architecture = None
    body = (await client.get(_url(model.id), headers=account.auth)).json()
    assert body["architecture"] is None and body["classes"] == TEXT_CLASSES


async def test_detail_of_a_text_model_says_it_takes_texts(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], text_net: Net,
) -> None:
    model = insert_model(factory, account.user, text_net)
    body = (await client.get(_url(model.id), headers=account.auth)).json()
    assert body["preprocessing"] == "text"
    assert body["input"]["dtype"] == "int32"
    assert body["classes"] == TEXT_CLASSES


async def test_detail_of_a_model_whose_dataset_is_gone_has_no_dataset_id(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    model = insert_model(factory, account.user, image_net)
    with session_scope(factory) as s:
        s.get_one(Job, model.job_id).dataset_id = None
    r = await client.get(_url(model.id), headers=account.auth)
    assert r.status_code == 200, r.text
    assert r.json()["dataset_id"] is None


# ---- downloads ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "?format=onnx"])
async def test_onnx_download_computes_what_core_computes(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net, query: str,
) -> None:
    model = insert_model(factory, account.user, image_net)
    r = await client.get(_url(model.id, "/download" + query), headers=account.auth)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-disposition"] == f'attachment; filename="netsynth-model-{model.id.hex[:8]}.onnx"'
    assert r.content == image_net.onnx
    session = ort.InferenceSession(r.content, providers=["CPUExecutionProvider"])
    x = _pixels(5).astype(np.float32)
    (proba,) = session.run(["probabilities"], {"input": x})
    np.testing.assert_allclose(proba, image_net.proba(x), atol=1e-5)


async def test_native_download_holds_every_file_and_the_same_weights(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    model = insert_model(factory, account.user, image_net)
    r = await client.get(_url(model.id, "/download?format=native"), headers=account.auth)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/zip"
    assert r.headers["content-disposition"] == f'attachment; filename="netsynth-model-{model.id.hex[:8]}.zip"'
    with zipfile.ZipFile(io.BytesIO(r.content)) as archive:
        assert sorted(archive.namelist()) == sorted([
            "README.md", "spec.json", "weights.safetensors", "model.onnx", "preprocessing.json", "labels.json",
            "metrics.json"])
        files = {name: archive.read(name) for name in archive.namelist()}
    assert json.loads(files["spec.json"]) == image_net.spec
    assert json.loads(files["labels.json"]) == IMAGE_CLASSES
    assert json.loads(files["preprocessing.json"]) == {"kind": "image", "shape": [8, 8, 1], "resize": "centre-crop"}
    assert json.loads(files["metrics.json"]) == {"accuracy": 0.875, "loss": 0.4}
    assert files["model.onnx"] == image_net.onnx
    assert files["weights.safetensors"] == image_net.weights
    loaded = checkpoint.from_bytes(files["weights.safetensors"])
    assert loaded.spec.to_dict() == image_net.spec
    want = tree.flatten(image_net.variables["params"])
    got = tree.flatten(loaded.variables["params"])
    assert got.keys() == want.keys()
    for path, array in want.items():
        np.testing.assert_array_equal(got[path], np.asarray(array))
    readme = files["README.md"].decode()
    for mention in ("checkpoint.from_bytes", "onnxruntime", '"input"', '"probabilities"', "int32", "float32"):
        assert mention in readme


REPORT = {"tolerance": 0.005, "val_accuracy_before": 0.9, "val_accuracy_after": 0.896, "ratio": 7.5,
          "before": {"params": 123, "nonzeros": 123}, "after": {"params": 99, "nonzeros": 40}, "bits": {},
          "kept_fraction": {}, "stop_reason": "completed"}


async def test_a_compressed_model_shows_its_report_ships_its_artifact_and_predicts(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
) -> None:
    packed = artifact.encode(Spec.from_dict(image_net.spec), image_net.variables)
    with session_scope(factory) as s:
        job = make_job(s, account.user)
        dense = model_row(job, image_net)
        model = replace_row(model_row(job, image_net), variant="compressed", weights=packed, weights_bytes=len(packed),
                            metrics={**REPORT, "test_accuracy": 0.88, "model_bytes": len(packed)})
        s.add_all([dense, model])
        s.flush()
    body = (await client.get(_url(model.id), headers=account.auth)).json()
    assert (body["variant"], body["weights_bytes"]) == ("compressed", len(packed))
    assert body["compression"] == REPORT
    assert (await client.get(_url(dense.id), headers=account.auth)).json()["compression"] is None

    r = await client.get(_url(model.id, "/download?format=native"), headers=account.auth)
    assert r.status_code == 200, r.text
    assert r.headers["content-disposition"].endswith(f'netsynth-model-{model.id.hex[:8]}-compressed.zip"')
    with zipfile.ZipFile(io.BytesIO(r.content)) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    assert "weights.safetensors" not in files and files["model.nsz"] == packed
    assert json.loads(files["metrics.json"])["val_accuracy_after"] == 0.896
    assert "artifact.decode" in files["README.md"].decode()
    decoded = artifact.decode(files["model.nsz"])
    onnx = await client.get(_url(model.id, "/download?format=onnx"), headers=account.auth)
    assert onnx.content == files["model.onnx"] == image_net.onnx

    pixels = _pixels(4)
    r = await client.post(_url(model.id, "/predict"), files=_files([_png(p) for p in pixels]), headers=account.auth)
    assert r.status_code == 200, r.text
    want = predict_proba(build(decoded.spec), decoded.variables, pixels.astype(np.float32))
    got = np.array([p["probabilities"] for p in r.json()["predictions"]])
    np.testing.assert_allclose(got, want, atol=1e-4)


def replace_row(row: TrainedModel, **changes: Any) -> TrainedModel:
    """A copy of a (transient) model row with `changes`."""
    fields = ("job_id", "spec", "weights", "onnx", "classes", "preprocessing", "metrics", "param_count",
              "weights_bytes", "variant")
    return TrainedModel(**({f: getattr(row, f) for f in fields} | changes))


def test_native_package_is_a_pure_function_of_themodel_row(image_net: Net) -> None:
    row = model_row(Job(id=uuid.uuid4()), image_net)
    assert native_package(row) == native_package(row)
    with zipfile.ZipFile(io.BytesIO(native_package(row))) as archive:
        assert archive.testzip() is None


@pytest.mark.parametrize("fmt", ["pytorch", "ONNX", ""])
async def test_unknown_download_format_is_422(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net, fmt: str,
) -> None:
    model = insert_model(factory, account.user, image_net)
    r = await client.get(_url(model.id, f"/download?format={fmt}"), headers=account.auth)
    assert assert_problem(r, 422)["type"] == "urn:netsynth:problem:validation-error"


# ---- ownership and authentication ----------------------------------------------------------------------------------

ROUTES = [("GET", ""), ("GET", "/download"), ("GET", "/download?format=native"), ("POST", "/predict")]


@pytest.mark.parametrize(("method", "suffix"), ROUTES)
async def test_another_users_model_answers_like_a_missing_one(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
    method: str, suffix: str,
) -> None:
    theirs = insert_model(factory, None, image_net)
    files = _files([_png(_pixels(1)[0])]) if method == "POST" else None
    answers = []
    for model_id in (theirs.id, uuid.uuid4()):
        r = await client.request(method, _url(model_id, suffix), headers=account.auth, files=files)
        body = assert_problem(r, 404)
        assert body["detail"] == f"no model {model_id}"
        answers.append({k: v for k, v in body.items() if k not in {"detail", "instance"}})
    assert answers[0] == answers[1]


@pytest.mark.parametrize(("method", "suffix"), ROUTES)
async def test_every_route_needs_an_api_key(
    client: httpx.AsyncClient, account: Account, factory: sessionmaker[Session], image_net: Net,
    method: str, suffix: str,
) -> None:
    model = insert_model(factory, account.user, image_net)
    assert_problem(await client.request(method, _url(model.id, suffix)), 401)
