"""End to end with every blob on a real S3-compatible server (SeaweedFS on loopback, signed with credentials from
the AWS variables): upload, a job on a real worker process, download, predict; the dataset is an object in the
bucket, nothing is written to a shared blob folder, and deleting the dataset deletes its object."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from infra.settings import Settings
from tests.datasets import png_bytes
from tests.store.s3server import S3Server
from tests.workers.conftest import Digits, make_keys
from tests.workers.service import ApiServer, WorkerProcess, sse_events

V1 = "/api/v1"
BUDGET = 60


def test_a_job_runs_with_its_blobs_on_s3(pg_redis_settings: Settings, digits: Digits, s3_server: S3Server,
                                         worker_factory: list[WorkerProcess], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_server.env().items():  # boto3's default chain, in this process and the worker's
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = s3_server.bucket()
    api_settings = pg_redis_settings.model_copy(update={
        "blob_url": f"s3://{bucket}/svc", "s3_endpoint_url": s3_server.endpoint, "blob_dir": tmp_path / "api"})
    worker_settings = api_settings.model_copy(update={"blob_dir": tmp_path / "worker"})  # no shared folder
    keys = make_keys(api_settings.database_url)
    worker_factory.append(WorkerProcess(worker_settings, tmp_path / "worker.log").wait_ready())
    listing = s3_server.client()

    def objects() -> list[str]:
        return sorted(o["Key"] for o in listing.list_objects_v2(Bucket=bucket).get("Contents", []))

    with ApiServer(api_settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        with digits.zip_path.open("rb") as f:
            r = client.post(f"{V1}/datasets", headers=keys.alice, files={"file": ("digits.zip", f)})
        assert r.status_code == 201, r.text
        dataset = r.json()
        (dataset_key,) = objects()
        assert dataset_key.startswith("svc/datasets/")
        r = client.post(f"{V1}/jobs", headers=keys.alice, json={"dataset_id": dataset["id"], "budget": BUDGET})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        events = list(sse_events(client, f"{V1}/jobs/{job_id}/events", keys.alice, timeout=240))
        assert events[-1]["data"]["state"] == "succeeded", (events[-3:], worker_factory[0].log()[-3000:])

        job = client.get(f"{V1}/jobs/{job_id}", headers=keys.alice).json()
        model_id = job["model_ids"][0]
        onnx = client.get(f"{V1}/models/{model_id}/download", params={"format": "onnx"}, headers=keys.alice)
        assert onnx.status_code == 200 and len(onnx.content) > 1000
        files = [("files", (f"{i}.png", png_bytes(img), "image/png")) for i, img in enumerate(digits.x_test[:8])]
        r = client.post(f"{V1}/models/{model_id}/predict", headers=keys.alice, files=files)
        assert r.status_code == 200, r.text
        labels = [int(p["label"]) for p in r.json()["predictions"]]
        assert np.mean(np.asarray(labels) == digits.y_test[:8]) >= 0.5, labels

        assert dataset_key in objects()  # the dataset stayed in the bucket; trial weights were discarded
        assert not [p for p in (tmp_path / "worker").rglob("*") if p.is_file()]  # the worker kept no blob
        assert client.delete(f"{V1}/datasets/{dataset['id']}", headers=keys.alice).status_code == 204
        assert objects() == []
