"""The client against the real service (HTTP, PostgreSQL, Redis, a Celery worker): one short job followed by the
sync client, the async client and the `netsynth` remote commands; a watch resumed after its connection was cut."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

from infra.settings import Settings
from netsynth import ApiError, AsyncClient, Client
from netsynth.types import Event
from tests.datasets import png_bytes
from tests.netsynth.conftest import CuttingProxy, keys_of
from tests.workers.conftest import Digits, make_keys
from tests.workers.service import ROOT, ApiServer, WorkerProcess

BUDGET = 60


def _onnx_labels(onnx: bytes, x: np.ndarray) -> tuple[list[str], np.ndarray]:
    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    (proba,) = session.run(["probabilities"], {"input": x.astype(np.float32)})
    return [str(i) for i in np.argmax(proba, axis=1)], proba


def _check_events(events: list[Event], logged: list[Event]) -> None:
    """A watch's events: every logged one once, in seq order, then the end."""
    assert [e["seq"] for e in events[:-1]] == [e["seq"] for e in logged], events
    assert [e["kind"] for e in events[:-1]] == [e["kind"] for e in logged]
    assert events[-1]["kind"] == "end" and events[-1]["payload"]["state"] == "succeeded"


def _cli(url: str, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NETSYNTH_URL": url, "NETSYNTH_API_KEY": key}
    return subprocess.run([sys.executable, "-m", "api.cli", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def _async_path(url: str, key: str, digits: Digits, job_id: str, model_id: str, tmp: Path) -> list[Event]:
    """Upload, submit (then cancel) a job and watch it, watch the finished job, download, predict: with AsyncClient."""

    async def run() -> list[Event]:
        async with AsyncClient(url, key, progress=False) as client:
            dataset = await client.upload_dataset(digits.zip_path, name="async")
            assert dataset["sample_count"] == 1497 and dataset["id"] in [d["id"] for d in await client.datasets()]
            job = await client.create_job(dataset["id"], budget=10)
            await client.cancel(job["id"])
            ended = [e async for e in client.watch(job["id"])]
            assert ended[-1]["kind"] == "end" and ended[-1]["payload"]["state"] in ("cancelled", "succeeded")
            events = [e async for e in client.watch(job_id)]
            path = await client.download(model_id, tmp / "async.onnx")
            predictions = await client.predict(model_id, [png_bytes(img) for img in digits.x_test[:4]])
            assert [p["label"] for p in predictions["predictions"]] == _onnx_labels(path.read_bytes(),
                                                                                   digits.x_test[:4])[0]
            return events

    return asyncio.run(run())


def test_client_end_to_end(pg_redis_settings: Settings, digits: Digits, worker_factory: list[WorkerProcess],
                           cutting_proxy: list[CuttingProxy], tmp_path: Path) -> None:
    settings = pg_redis_settings
    alice, bob = keys_of(make_keys(settings.database_url))
    worker_factory.append(WorkerProcess(settings, settings.blob_dir.parent / "worker.log").wait_ready())
    worker_factory.append(WorkerProcess(settings, settings.blob_dir.parent / "explainer.log",
                                        queues=settings.explain_queue).wait_ready())
    with ApiServer(settings) as api, Client(api.url, alice, progress=False) as client:
        dataset = client.upload_dataset(digits.zip_path, name="digits")
        assert dataset["name"] == "digits" and dataset["classes"] == [str(i) for i in range(10)]
        job = client.create_job(dataset["id"], budget=BUDGET, tolerance=0.01, seed=1)
        assert job["state"] == "queued" and job["id"] in [j["id"] for j in client.jobs()]
        events = list(client.watch(job["id"]))
        logged = client.events(job["id"])
        _check_events(events, logged)
        assert "candidate" in [e["kind"] for e in events]

        job = client.job(job["id"])
        assert job["state"] == "succeeded" and job["progress"] == 1.0, job
        model_id = job["model_ids"][0]
        assert client.candidates(job["id"]) and any(p["delivered"] for p in client.pareto(job["id"]))
        assert client.model(model_id)["classes"] == [str(i) for i in range(10)]
        onnx = client.download(model_id, tmp_path / "model.onnx")
        native = client.download(model_id, tmp_path / "model.zip", format="native")
        assert onnx.stat().st_size == client.model(model_id)["onnx_bytes"] and native.stat().st_size > 0
        assert not list(tmp_path.glob(".*.part"))

        images = []
        for i, img in enumerate(digits.x_test[:8]):
            images.append(tmp_path / f"{i}.png")
            images[-1].write_bytes(png_bytes(img))
        predictions = client.predict(model_id, [str(p) for p in images[:4]] + [p.read_bytes() for p in images[4:]])
        labels, proba = _onnx_labels(onnx.read_bytes(), digits.x_test[:8])
        assert [p["label"] for p in predictions["predictions"]] == labels
        np.testing.assert_allclose([p["probabilities"] for p in predictions["predictions"]], proba, atol=1e-5)
        try:
            assert client.report(model_id)["report"]["classes"] == [str(i) for i in range(10)]
        except ApiError as exc:  # the budget left no time for it
            assert exc.status == 404 and exc.reason == "report-absent", exc.body

        explained = client.explain(model_id, images[0].read_bytes(), method="occlusion", timeout=120)
        assert explained["state"] == "done", explained
        assert explained["attribution"] is not None and explained["attribution"]["label"] == labels[0]

        # a watch whose connection is cut in the middle of an event resumes after the last whole one
        proxy = CuttingProxy(api.port, b"id: 5")
        cutting_proxy.append(proxy)
        with Client(proxy.url, alice, progress=False) as cut:
            resumed = list(cut.watch(job["id"]))
        assert proxy.cut and proxy.connections >= 2
        _check_events(resumed, logged)

        _check_events(_async_path(api.url, alice, digits, job["id"], model_id, tmp_path), logged)

        # the commands
        r = _cli(api.url, alice, "datasets", "upload", str(digits.zip_path), "--name", "cli")
        assert r.returncode == 0, r.stderr
        cli_dataset = r.stdout.split("\t")[0]
        r = _cli(api.url, alice, "datasets", "list")
        assert r.returncode == 0 and cli_dataset in r.stdout and dataset["id"] in r.stdout, r
        r = _cli(api.url, alice, "jobs", "create", "--dataset", cli_dataset, "--budget", "10")
        assert r.returncode == 0, r.stderr
        cli_job = r.stdout.strip()
        r = _cli(api.url, alice, "jobs", "cancel", cli_job)
        assert r.returncode == 0 and r.stdout.startswith(f"job {cli_job} "), r
        r = _cli(api.url, alice, "jobs", "watch", cli_job)
        assert r.returncode in (0, 1) and r.stdout.startswith(f"job {cli_job} "), r
        r = _cli(api.url, alice, "jobs", "list")
        assert r.returncode == 0 and cli_job in r.stdout and job["id"] in r.stdout, r
        r = _cli(api.url, alice, "jobs", "watch", job["id"], "--events")
        assert r.returncode == 0 and f"job {job['id']} succeeded; models: {model_id} (dense)" in r.stdout, r
        r = _cli(api.url, alice, "models", "download", model_id, "--format", "onnx", "--output",
                 str(tmp_path / "cli.onnx"))
        assert r.returncode == 0 and (tmp_path / "cli.onnx").read_bytes() == onnx.read_bytes(), r
        r = _cli(api.url, alice, "models", "predict", model_id, *map(str, images))
        assert r.returncode == 0, r.stderr
        assert [line.split("\t")[1] for line in r.stdout.splitlines()] == labels
        r = _cli(api.url, bob, "models", "download", model_id)
        assert r.returncode == 1 and r.stdout == "" and "404" in r.stderr, r
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        r = _cli(api.url, "", "jobs", "list")
        assert r.returncode == 2
        assert r.stderr.strip() == "netsynth: error: no API key: set NETSYNTH_API_KEY or pass --key"
