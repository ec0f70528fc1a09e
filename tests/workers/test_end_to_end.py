"""End to end through HTTP, a real Celery worker process, PostgreSQL and Redis: upload, train, download, predict,
read the models' explainability reports."""

from __future__ import annotations

import io
import json
import zipfile

import httpx
import numpy as np
import onnxruntime as ort

from infra.broker import time_limits
from infra.settings import Settings
from tests.datasets import png_bytes
from tests.workers.conftest import Digits, make_keys
from tests.workers.service import ApiServer, WorkerProcess, sse_events

V1 = "/api/v1"
BUDGET = 90  # a loaded machine spends much of a short budget compiling


def _onnx_accuracy(onnx: bytes, x: np.ndarray, y: np.ndarray) -> float:
    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    (proba,) = session.run(["probabilities"], {"input": x.astype(np.float32)})
    return float(np.mean(np.argmax(proba, axis=1) == y))


def _check_compressed(client: httpx.Client, auth: dict[str, str], model_id: str, digits: Digits) -> None:
    """The compressed model: its report within the job's tolerance, both downloads, predictions as its ONNX."""
    model = client.get(f"{V1}/models/{model_id}", headers=auth).json()
    report = model["compression"]
    assert model["variant"] == "compressed" and report["tolerance"] == 0.01
    assert report["val_accuracy_after"] >= report["val_accuracy_before"] - 0.01 - 1e-9
    assert model["weights_bytes"] == report["after"]["compressed_bytes"]
    native = client.get(f"{V1}/models/{model_id}/download", params={"format": "native"}, headers=auth)
    with zipfile.ZipFile(io.BytesIO(native.content)) as package:
        assert len(package.read("model.nsz")) == model["weights_bytes"]
        onnx = package.read("model.onnx")
    assert client.get(f"{V1}/models/{model_id}/download", headers=auth).content == onnx
    files = [("files", (f"{i}.png", png_bytes(img), "image/png")) for i, img in enumerate(digits.x_test[:8])]
    r = client.post(f"{V1}/models/{model_id}/predict", headers=auth, files=files)
    assert r.status_code == 200, r.text
    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    (proba,) = session.run(["probabilities"], {"input": digits.x_test[:8].astype(np.float32)})
    assert [p["label"] for p in r.json()["predictions"]] == [str(i) for i in np.argmax(proba, axis=1)]


def _check_report(client: httpx.Client, auth: dict[str, str], model_id: str, built: bool | None) -> None:
    """The model's explainability report as its job's `report` event says: whole (JSON, every image, the page, the
    native download's report/) when it was built, absent otherwise."""
    r = client.get(f"{V1}/models/{model_id}/report", headers=auth)
    if not built:
        assert r.status_code == 404 and r.json()["reason"] == "report-absent", r.text
        return
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["report"]["classes"] == [str(i) for i in range(10)]
    assert sorted(body["images"]) == sorted(body["report"]["images"])
    for url in body["images"].values():
        assert client.get(url, headers=auth).content.startswith(b"\x89PNG")
    assert client.get(body["html"], headers=auth).text.startswith("<!doctype html>")
    native = client.get(f"{V1}/models/{model_id}/download", params={"format": "native"}, headers=auth)
    with zipfile.ZipFile(io.BytesIO(native.content)) as package:
        assert json.loads(package.read("report/report.json")) == body["report"]
        assert {f"report/{name}" for name in body["images"]} <= set(package.namelist())


def test_digits_job_end_to_end(pg_redis_settings: Settings, digits: Digits, worker_factory: list[WorkerProcess],
                               tmp_path: object) -> None:
    settings = pg_redis_settings
    keys = make_keys(settings.database_url)
    worker_factory.append(WorkerProcess(settings, settings.blob_dir.parent / "worker.log").wait_ready())
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        with digits.zip_path.open("rb") as f:
            r = client.post(f"{V1}/datasets", headers=keys.alice, files={"file": ("digits.zip", f)})
        assert r.status_code == 201, r.text
        dataset = r.json()
        r = client.post(f"{V1}/jobs", headers=keys.alice,
                        json={"dataset_id": dataset["id"], "budget": BUDGET, "tolerance": 0.01})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]

        events = list(sse_events(client, f"{V1}/jobs/{job_id}/events", keys.alice, timeout=240))
        kinds = [e["event"] for e in events]
        assert kinds[0] == "queued" and kinds[-1] == "end", kinds
        assert kinds.index("attempt") < kinds.index("candidate") < kinds.index("succeeded"), kinds
        seqs = [int(e["id"]) for e in events[:-1]]
        assert seqs == sorted(set(seqs))
        assert events[-1]["data"]["state"] == "succeeded"

        job = client.get(f"{V1}/jobs/{job_id}", headers=keys.alice).json()
        assert job["state"] == "succeeded" and job["progress"] == 1.0 and job["tolerance"] == 0.01, job
        soft_limit, _ = time_limits(BUDGET)  # compression's final measurements may pass the budget a little
        assert 0 < job["device_seconds"] <= soft_limit and job["attempts"] == 1
        assert [m["variant"] for m in job["models"]] == ["dense", "compressed"], job
        model_id, small_id = job["model_ids"]

        candidates = client.get(f"{V1}/jobs/{job_id}/candidates", headers=keys.alice).json()
        assert candidates and all({"curve", "predicted", "accuracy", "loss"} <= c["metrics"].keys() for c in candidates)
        assert any(c["metrics"]["loss"] is not None for c in candidates)  # the fully trained ones have one
        pareto = client.get(f"{V1}/jobs/{job_id}/pareto", headers=keys.alice).json()
        assert any(p["delivered"] for p in pareto)
        _check_compressed(client, keys.alice, small_id, digits)
        reports = [e["data"]["payload"] for e in events if e["event"] == "report"]
        built = {report["variant"]: report["built"] for report in reports}
        for variant, mid in (("dense", model_id), ("compressed", small_id)):
            _check_report(client, keys.alice, mid, built.get(variant))

        model = client.get(f"{V1}/models/{model_id}", headers=keys.alice).json()
        assert model["classes"] == [str(i) for i in range(10)]
        onnx = client.get(f"{V1}/models/{model_id}/download", params={"format": "onnx"}, headers=keys.alice)
        assert onnx.status_code == 200
        accuracy = _onnx_accuracy(onnx.content, digits.x_test, digits.y_test)
        assert accuracy >= 0.90, (accuracy, model["metrics"], job)

        native = client.get(f"{V1}/models/{model_id}/download", params={"format": "native"}, headers=keys.alice)
        with zipfile.ZipFile(io.BytesIO(native.content)) as package:
            assert {"spec.json", "weights.safetensors", "preprocessing.json", "labels.json"} <= set(package.namelist())

        files = [("files", (f"{i}.png", png_bytes(img), "image/png")) for i, img in enumerate(digits.x_test[:8])]
        r = client.post(f"{V1}/models/{model_id}/predict", headers=keys.alice, files=files)
        assert r.status_code == 200, r.text
        labels = [p["label"] for p in r.json()["predictions"]]
        session = ort.InferenceSession(onnx.content, providers=["CPUExecutionProvider"])
        (proba,) = session.run(["probabilities"], {"input": digits.x_test[:8].astype(np.float32)})
        assert labels == [str(i) for i in np.argmax(proba, axis=1)]

        # a second user sees none of it
        assert client.get(f"{V1}/datasets", headers=keys.bob).json() == []
        assert client.get(f"{V1}/jobs", headers=keys.bob).json() == []
        for path in (f"datasets/{dataset['id']}", f"jobs/{job_id}", f"jobs/{job_id}/events", f"models/{model_id}",
                     f"models/{small_id}", f"jobs/{job_id}/candidates", f"jobs/{job_id}/pareto",
                     f"models/{model_id}/download", f"models/{model_id}/report", f"models/{small_id}/report.html"):
            r = client.get(f"{V1}/{path}", headers=keys.bob)
            assert r.status_code == 404, (path, r.text)
        assert client.post(f"{V1}/jobs/{job_id}/cancel", headers=keys.bob).status_code == 404
