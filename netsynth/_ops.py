"""Every client operation, once: a generator that yields the `Call`s (and `Sleep`s) it needs, is sent each call's
`Reply`, and returns the result. The sync and async clients only drive these."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from netsynth._protocol import API, Call, Reply, Sleep, Upload
from netsynth.types import Dataset, Event, Explanation, Job, Model, Predictions, Report

T = TypeVar("T")
Op = Generator[Call | Sleep, Reply | None, T]
ImageInput = str | Path | bytes
Format = Literal["onnx", "native"]
POLL_S = 0.5


def _get(path: str, **params: str | int) -> Op[Any]:
    reply = yield Call("GET", f"{API}{path}", params=params or None)
    assert reply is not None
    return reply.json()


def upload_dataset(path: Path, name: str | None, resize: str | None) -> Op[Dataset]:
    """Upload a dataset file (streamed from disk)."""
    data = {key: value for key, value in (("name", name), ("resize", resize)) if value is not None}
    reply = yield Call("POST", f"{API}/datasets", data=data, upload=Upload("file", path, path.name),
                       label=f"uploading {path.name}")
    assert reply is not None
    return cast(Dataset, reply.json())


def datasets() -> Op[list[Dataset]]:
    """The caller's datasets."""
    return cast(list[Dataset], (yield from _get("/datasets")))


def create_job(dataset_id: str, budget: str | int | None, constraints: dict[str, Any] | None,
               tolerance: float | None, seed: int | None, epochs: int | None) -> Op[Job]:
    """Submit a synthesis job."""
    body: dict[str, Any] = {"dataset_id": dataset_id}
    for key, value in (("budget", budget), ("constraints", constraints), ("tolerance", tolerance), ("seed", seed),
                       ("epochs", epochs)):
        if value is not None:
            body[key] = value
    reply = yield Call("POST", f"{API}/jobs", json=body)
    assert reply is not None
    return cast(Job, reply.json())


def job(job_id: str) -> Op[Job]:
    """One job."""
    return cast(Job, (yield from _get(f"/jobs/{job_id}")))


def jobs(limit: int, offset: int) -> Op[list[Job]]:
    """The caller's jobs, newest first."""
    return cast(list[Job], (yield from _get("/jobs", limit=limit, offset=offset)))


def events(job_id: str, after: int) -> Op[list[Event]]:
    """A job's events so far (not waiting for more)."""
    reply = yield Call("GET", f"{API}/jobs/{job_id}/events", params={"after": after},
                       headers={"Accept": "application/json"})
    assert reply is not None
    return cast(list[Event], reply.json())


def cancel(job_id: str) -> Op[Job]:
    """Cancel a job."""
    reply = yield Call("POST", f"{API}/jobs/{job_id}/cancel")
    assert reply is not None
    return cast(Job, reply.json())


def candidates(job_id: str) -> Op[list[dict[str, Any]]]:
    """A job's search log."""
    return cast(list[dict[str, Any]], (yield from _get(f"/jobs/{job_id}/candidates")))


def pareto(job_id: str) -> Op[list[dict[str, Any]]]:
    """A job's Pareto front."""
    return cast(list[dict[str, Any]], (yield from _get(f"/jobs/{job_id}/pareto")))


def model(model_id: str) -> Op[Model]:
    """One model."""
    return cast(Model, (yield from _get(f"/models/{model_id}")))


def download(model_id: str, path: Path, fmt: Format) -> Op[Path]:
    """Write a model's ONNX graph or native zip to `path`."""
    if fmt not in ("onnx", "native"):
        raise ValueError(f"format must be 'onnx' or 'native', not {fmt!r}")
    yield Call("GET", f"{API}/models/{model_id}/download", params={"format": fmt}, sink=path,
               label=f"downloading {path.name}")
    return path


def _image_part(index: int, item: ImageInput) -> tuple[str, tuple[str, bytes]]:
    if isinstance(item, bytes):
        return "files", (f"{index}.png", item)
    path = Path(item)
    return "files", (path.name, path.read_bytes())


def predict(model_id: str, inputs: Sequence[ImageInput]) -> Op[Predictions]:
    """Classify images (paths or bytes) or texts (strings) with a model; plain strings are texts when the model is a
    text model, image paths otherwise."""
    items = list(inputs)
    kind = "image"
    if items and all(isinstance(item, str) for item in items):
        kind = (yield from model(model_id))["preprocessing"]
    if kind == "text":
        call = Call("POST", f"{API}/models/{model_id}/predict", json={"texts": items})
    else:
        call = Call("POST", f"{API}/models/{model_id}/predict",
                    files=[_image_part(i, item) for i, item in enumerate(items)])
    reply = yield call
    assert reply is not None
    return cast(Predictions, reply.json())


def report(model_id: str) -> Op[Report]:
    """A model's explainability report."""
    return cast(Report, (yield from _get(f"/models/{model_id}/report")))


def explain(model_id: str, given: ImageInput, method: str, wait: bool, timeout: float) -> Op[Explanation]:
    """Ask for an explanation of one input (a text as a string, an image as a path or bytes), then, with `wait`,
    poll it until a worker has answered (done or failed) or `timeout` seconds have passed."""
    if isinstance(given, str) and not Path(given).is_file():
        call = Call("POST", f"{API}/models/{model_id}/explain", json={"text": given, "method": method})
    else:
        _, part = _image_part(0, given)
        call = Call("POST", f"{API}/models/{model_id}/explain", data={"method": method}, files=[("file", part)])
    reply = yield call
    assert reply is not None
    answer = cast(Explanation, reply.json())
    waited = 0.0
    while wait and answer["state"] in ("queued", "running") and waited < timeout:
        yield Sleep(POLL_S)
        waited += POLL_S
        reply = yield Call("GET", answer["url"])
        assert reply is not None
        answer = cast(Explanation, reply.json())
    return answer
