"""Explaining through HTTP and a real Celery worker process serving the explain queue (PostgreSQL, Redis): a text
and an image, each polled until the worker answers with the attribution its model gives in this process too."""

from __future__ import annotations

import io
import time
from typing import Any

import httpx
import numpy as np
from PIL import Image
from sqlalchemy import select

from infra.settings import Settings
from store.db import make_engine, make_session_factory, session_scope
from store.models import Job, User
from tests import nets
from tests.datasets import png_bytes
from tests.workers.conftest import make_keys
from tests.workers.service import ApiServer, WorkerProcess
from workers.attribution import explain, subject_of

V1 = "/api/v1"
TEXT = "good acting and a bad plot"
PIXELS = np.random.default_rng(5).integers(0, 256, (8, 8, 1), dtype=np.uint8)


def _models(settings: Settings) -> dict[str, tuple[str, nets.Net]]:
    """Alice's text and image models (real tiny networks), their jobs on the test's job queue (which no worker serves
    here: their explanations go to the explain queue)."""
    engine = make_engine(settings.database_url)
    factory = make_session_factory(engine)
    try:
        with factory() as s:
            alice = s.scalars(select(User).where(User.email == "alice@example.org")).one()
        made = {}
        for kind, net in (("text", nets.text_net()), ("image", nets.image_net())):
            model = nets.insert_model(factory, alice, net)
            with session_scope(factory) as s:
                s.get_one(Job, model.job_id).queue = settings.default_queue
            made[kind] = (str(model.id), net)
        return made
    finally:
        engine.dispose()


def _answer(client: httpx.Client, url: str, auth: dict[str, str], timeout: float = 240) -> dict[str, Any]:
    """Poll `url` until the worker has answered (200)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.get(url, headers=auth)
        if r.status_code == 200:
            body: dict[str, Any] = r.json()
            return body
        assert r.status_code == 202 and r.json()["state"] in ("queued", "running"), r.text
        time.sleep(0.5)
    raise AssertionError(f"no answer at {url} within {timeout:.0f} s")


def _expected(net: nets.Net, method: str, name: str, **inputs: Any) -> dict[str, Any]:
    subject = subject_of(net.spec, net.weights, "dense", net.preprocessing)
    (attribution,) = explain(subject, net.classes, net.preprocessing, method, [name], **inputs)
    return attribution.to_dict()


def test_a_text_and_an_image_are_explained_by_a_worker(pg_redis_settings: Settings,
                                                       worker_factory: list[WorkerProcess]) -> None:
    settings = pg_redis_settings
    keys = make_keys(settings.database_url)
    models = _models(settings)
    # the explain queue's worker only: no worker serves the jobs' queue, where explanations no longer go
    worker_factory.append(WorkerProcess(settings, settings.blob_dir.parent / "worker.log",
                                        queues=settings.explain_queue).wait_ready())
    (text_id, text_net), (image_id, image_net) = models["text"], models["image"]
    with ApiServer(settings) as api, httpx.Client(base_url=api.url, timeout=60) as client:
        r = client.post(f"{V1}/models/{text_id}/explain", headers=keys.alice,
                        json={"text": TEXT, "method": "occlusion"})
        assert r.status_code == 202, r.text
        text_url = r.headers["location"]
        r = client.post(f"{V1}/models/{image_id}/explain", headers=keys.alice,
                        files={"file": ("ant.png", png_bytes(PIXELS), "image/png")},
                        data={"method": "integrated-gradients"})
        assert r.status_code == 202, r.text
        image_url = r.headers["location"]
        refused = client.post(f"{V1}/models/{text_id}/explain", headers=keys.alice,
                              json={"text": TEXT, "method": "gradcam"})
        assert refused.status_code == 422 and "does not explain text models" in refused.json()["detail"]

        answered = _answer(client, text_url, keys.alice)
        assert answered["state"] == "done", (answered, worker_factory[0].log()[-3000:])
        got, want = answered["attribution"], _expected(text_net, "occlusion", "0", texts=[TEXT])
        assert (got["tokens"], got["label"], got["method"]) == (TEXT.split(), want["label"], "occlusion")
        np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)
        assert answered["overlay"] is None

        answered = _answer(client, image_url, keys.alice)
        assert answered["state"] == "done", (answered, worker_factory[0].log()[-3000:])
        got = answered["attribution"]
        want = _expected(image_net, "integrated-gradients", "ant.png", images=PIXELS[None])
        assert (got["input"], got["label"]) == ("ant.png", want["label"])
        np.testing.assert_allclose(got["map"], want["map"], atol=1e-3)
        overlay = client.get(answered["overlay"], headers=keys.alice)
        assert overlay.status_code == 200 and overlay.headers["content-type"] == "image/png"
        assert Image.open(io.BytesIO(overlay.content)).format == "PNG"

        for url in (text_url, image_url, f"{image_url}/overlay.png"):  # bob sees none of alice's
            assert client.get(url, headers=keys.bob).status_code == 404
        assert client.post(f"{V1}/models/{text_id}/explain", headers=keys.bob,
                           json={"text": TEXT, "method": "occlusion"}).status_code == 404
