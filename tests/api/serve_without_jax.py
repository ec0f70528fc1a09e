"""Serve a user's whole round trip through the real app in this process, then check JAX and the engine never loaded.

Run as `python -m tests.api.serve_without_jax FOLDER` (tests/api/test_app.py does): the app, on a SQLite database,
blob store and filesystem broker under FOLDER, takes an image upload, a job on it, the download of the job's model,
a prediction with it and a request to explain an image with it (queued for a worker). No worker runs here, so the
model is saved as a worker saves one (the job goes running, then succeeded, with a model row) but its ONNX graph is
built with `onnx.helper`, not exported by JAX. The exit status is 0 when every response was a success and none of
ENGINE was imported; otherwise stderr says what failed.
"""

from __future__ import annotations

import asyncio
import io
import sys
import uuid
import zipfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
from fastapi import FastAPI
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from domain.ingest.resize import CENTRE_CROP
from domain.package import LABELS, ONNX
from infra.broker import filesystem_dir
from infra.settings import Settings
from store.apikeys import create_api_key
from store.db import session_scope
from store.jobs import transition
from store.migrate import upgrade
from store.models import Job, JobState, TrainedModel
from tests.datasets import png_bytes, write_npz
from tests.store.factories import make_user

ENGINE = frozenset({"jax", "jaxlib", "flax", "optax", "core", "synthesis", "workers"})
"""Modules the API process must never import."""
CLASSES = ["dark", "light"]
SHAPE = (8, 8, 1)


def _images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` noisy uint8 images [n, *SHAPE], alternately dark and light, and their class names."""
    rng = np.random.default_rng(seed)
    light = np.arange(n) % 2
    x = rng.integers(0, 100, (n, *SHAPE)) + 150 * light.reshape(-1, 1, 1, 1)
    return x.astype(np.uint8), np.asarray(CLASSES)[light]


def onnx_classifier(shape: tuple[int, ...], classes: int) -> bytes:
    """A linear classifier of float32 pixels 0-255 [N, *shape] with netsynth's ONNX interface (input `input`,
    outputs `logits` and their softmax `probabilities` [N, classes]): of two classes, it picks the first for an
    image darker than mid-grey and the second for a lighter one."""
    features = int(np.prod(shape))
    slope = np.linspace(-1.0, 1.0, classes, dtype=np.float32)
    weights = np.tile(slope, (features, 1)) / (255 * features)  # logits: slope * (mean pixel / 255 - 1/2)
    bias = -slope / 2
    nodes = [
        helper.make_node("Flatten", ["input"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "weights", "bias"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *shape])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", classes])
         for name in ("logits", "probabilities")],
        initializer=[numpy_helper.from_array(weights, "weights"), numpy_helper.from_array(bias, "bias")])
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model, full_check=True)
    return bytes(model.SerializeToString())


def _check(response: httpx.Response, status: int) -> Any:
    """The JSON body of `response` (None when it is not JSON), which must have `status`."""
    assert response.status_code == status, f"{response.request.method} {response.request.url}: {response.text}"
    return response.json() if response.headers.get("content-type") == "application/json" else None


def _finish_as_a_worker(factory: sessionmaker[Session], job_id: uuid.UUID, dataset: dict[str, Any]) -> bytes:
    """Run the job's states and save its dense model as workers.results does, with a hand-built graph; return the
    graph."""
    image = dataset["profile"]["image"]
    shape = (image["height"], image["width"], image["channels"])
    graph = onnx_classifier(shape, len(dataset["classes"]))
    spec = {"name": "tiny", "input": {"shape": list(shape), "dtype": "float32", "modality": "image"}}
    with session_scope(factory) as s:
        job = s.get_one(Job, job_id)
        transition(job, JobState.RUNNING)
        s.add(TrainedModel(job_id=job.id, variant="dense", spec=spec, weights=b"weights", onnx=graph,
                           classes=dataset["classes"], param_count=0, weights_bytes=len(b"weights"),
                           preprocessing={"kind": "image", "shape": list(shape), "resize": CENTRE_CROP},
                           metrics={"accuracy": 1.0}))
        transition(job, JobState.SUCCEEDED)
    return graph


async def _round_trip(app: FastAPI, key: str, folder: Path) -> None:
    """Upload, submit, download and predict through `app` as the holder of `key`."""
    auth = {"Authorization": f"Bearer {key}"}
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=auth) as c:
        x, labels = _images(20, seed=0)
        upload = write_npz(folder / "shades.npz", x=x, y=labels)
        dataset = _check(await c.post("/api/v1/datasets", files={"file": (upload.name, upload.read_bytes())}), 201)
        assert dataset["status"] == "ready" and dataset["classes"] == CLASSES, dataset

        job = _check(await c.post("/api/v1/jobs", json={"dataset_id": dataset["id"]}), 201)
        broker = filesystem_dir(app.state.settings.broker_url)
        assert broker is not None and any(broker.glob("*.msg")), "submitting the job sent no task"

        graph = _finish_as_a_worker(app.state.session_factory, uuid.UUID(job["id"]), dataset)
        (model_id,) = _check(await c.get(f"/api/v1/jobs/{job['id']}"), 200)["model_ids"]
        url = f"/api/v1/models/{model_id}"
        _check(await c.get(url), 200)
        onnx_file = await c.get(f"{url}/download")
        _check(onnx_file, 200)
        assert onnx_file.content == graph, "the ONNX download is not the saved graph"
        native = await c.get(f"{url}/download", params={"format": "native"})
        _check(native, 200)
        with zipfile.ZipFile(io.BytesIO(native.content)) as archive:
            assert archive.read(ONNX) == graph and archive.read(LABELS)

        x, labels = _images(4, seed=1)
        files = [("files", (f"{i}.png", png_bytes(pixels), "image/png")) for i, pixels in enumerate(x)]
        predicted = _check(await c.post(f"{url}/predict", files=files), 200)
        assert predicted["classes"] == CLASSES, predicted
        assert [p["label"] for p in predicted["predictions"]] == list(labels), predicted
        assert all(len(p["probabilities"]) == len(CLASSES) for p in predicted["predictions"]), predicted

        asked = _check(await c.post(f"{url}/explain", files={"file": ("0.png", png_bytes(x[0]), "image/png")},
                                    data={"method": "integrated-gradients"}), 202)
        assert _check(await c.get(asked["url"]), 202)["state"] == "queued", asked
        _check(await c.get(f"{url}/report"), 404)  # a worker saves reports; this model has none


def main(folder: Path) -> int:
    """Serve the round trip on a fresh database under `folder`; 0 when JAX and the engine stayed unloaded."""
    settings = Settings(database_url=f"sqlite:///{folder / 'netsynth.db'}", blob_dir=folder / "blobs",
                       broker_url=f"filesystem://{folder}/broker")
    upgrade(settings.database_url)
    app = create_app(settings)
    with session_scope(app.state.session_factory) as s:
        key = create_api_key(s, make_user(s)).plaintext
    try:
        asyncio.run(_round_trip(app, key, folder))
    finally:
        app.state.engine.dispose()
    leaked = sorted(ENGINE & sys.modules.keys())
    if leaked:
        print(f"serving the API imported {leaked}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
