"""The workers' own blobs on S3 (a real SeaweedFS on loopback): a trial's weights are stored and loaded back through
the factory's store, and the reaper's sweep aborts an abandoned multipart upload."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from infra.settings import Settings
from store.blobstores import make_blob_store
from store.s3blobs import S3BlobStore
from tests.store.s3server import S3Server
from workers.context import Context
from workers.executor import save_weights
from workers.tasks import sweep_once


@pytest.fixture
def settings(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return Settings(blob_dir=tmp_path / "scratch", blob_url=f"s3://{s3_server.bucket()}/w",
                    s3_endpoint_url=s3_server.endpoint)


def test_trial_weights_round_trip_through_the_bucket(settings: Settings, s3_server: S3Server) -> None:
    blobs = make_blob_store(settings)
    assert isinstance(blobs, S3BlobStore)
    ctx: Any = Context(settings, None, blobs, "test")  # type: ignore[arg-type]
    job_id, row_id, weights = uuid.uuid4(), uuid.uuid4(), os.urandom(20 * 1024 * 1024 + 7)
    key = save_weights(ctx, job_id, row_id, weights)
    assert key == f"trials/{job_id}/{row_id}.safetensors"
    listed = s3_server.client().list_objects_v2(Bucket=blobs.bucket)["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [(f"w/{key}", len(weights))]
    with blobs.open(key) as stream:  # as the coordinator loads them (workers.executor)
        assert stream.read() == weights
    blobs.delete(key)
    assert not blobs.exists(key)


def test_the_reaper_sweeps_abandoned_multipart_uploads(settings: Settings, s3_server: S3Server,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    blobs = make_blob_store(settings)
    assert isinstance(blobs, S3BlobStore)
    client = s3_server.client()
    client.create_multipart_upload(Bucket=blobs.bucket, Key="w/trials/killed.safetensors")
    assert sweep_once(settings) == 0  # started just now: it may be a live upload
    sweep = S3BlobStore.sweep
    monkeypatch.setattr(S3BlobStore, "sweep", lambda self, idle_s=0.0: sweep(self, 0.0))  # an hour later
    assert sweep_once(settings) == 1
    assert client.list_multipart_uploads(Bucket=blobs.bucket).get("Uploads", []) == []
