"""`Client`: the netsynth API from synchronous code, over `httpx.Client`. The operations are `_ops`' (shared with
`AsyncClient`); this module only sends their calls, retries, streams and sleeps."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

from netsynth import _ops
from netsynth._ops import Format, ImageInput, Op
from netsynth._progress import TransferBar, WatchBar, shown
from netsynth._protocol import (
    Call,
    Reply,
    Sleep,
    WatchState,
    checked,
    delay_after_failure,
    delay_after_reply,
    multipart,
)
from netsynth.types import Dataset, Event, Explanation, Job, Model, Predictions, Report

T = TypeVar("T")
TIMEOUT = httpx.Timeout(60.0, connect=10.0)


def base_url(url: str) -> str:
    """The service's root URL (an URL ending in /api/v1 is taken too)."""
    return url.rstrip("/").removesuffix("/api/v1")


def headers(api_key: str) -> dict[str, str]:
    """The headers of every request."""
    return {"Authorization": f"Bearer {api_key}", "User-Agent": "netsynth-client"}


def partial(path: Path) -> Path:
    """Where a download is written until it is whole."""
    return path.with_name(f".{path.name}.part")


class Client:
    """A netsynth service at `url` (e.g. http://127.0.0.1:8000) used with `api_key`. Every method raises ApiError
    when the API answers a problem (429 and 503 are retried first, as Retry-After says) and ConnectionFailed when it
    cannot be reached. `progress` draws bars on stderr when it is a terminal."""

    def __init__(self, url: str, api_key: str, *, progress: bool = True, retries: int = 5,
                 timeout: httpx.Timeout | float = TIMEOUT) -> None:
        self.progress, self.retries = progress, max(1, retries)
        self._http = httpx.Client(base_url=base_url(url), headers=headers(api_key), timeout=timeout)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _exchange(self, call: Call, progress: bool) -> Reply:
        """Send `call` once; its answer (a download's body written to its sink)."""
        with TransferBar(call.label, None, shown(progress and bool(call.label))) as bar, multipart(call, bar) as parts:
            if call.upload is not None:
                bar.set_total(os.path.getsize(call.upload.path))
            request = self._http.build_request(call.method, call.path, params=call.params, json=call.json,
                                               headers=dict(call.headers), **parts)
            response = self._http.send(request, stream=True)
            try:
                if call.sink is None or response.status_code >= 400:
                    return Reply(response.status_code, response.headers, response.read())
                bar.restart()
                bar.set_total(int(response.headers.get("content-length", 0)) or None)
                part = partial(call.sink)
                with part.open("wb") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
                        bar.advance(len(chunk))
                part.replace(call.sink)
                return Reply(response.status_code, response.headers, b"")
            finally:
                response.close()

    def _send(self, call: Call, progress: bool) -> Reply:
        """Send `call`, retried as `_protocol` says; its successful answer."""
        attempt = 0
        while True:
            try:
                reply = self._exchange(call, progress)
            except httpx.TransportError as exc:
                time.sleep(delay_after_failure(call, attempt, exc))
            else:
                delay = delay_after_reply(reply, attempt, self.retries)
                if delay is None:
                    return checked(reply)
                time.sleep(delay)
            attempt += 1

    def _run(self, op: Op[T], progress: bool = False) -> T:
        """Carry out an operation of `_ops`."""
        try:
            step = next(op)
            while True:
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    step = op.send(None)
                else:
                    step = op.send(self._send(step, progress))
        except StopIteration as stop:
            result: T = stop.value
            return result

    def upload_dataset(self, path: str | Path, name: str | None = None, progress: bool = True,
                       resize: str | None = None) -> Dataset:
        """Upload a dataset file (image zip, .npz, CSV, TSV), streamed from disk; its validated profile."""
        return self._run(_ops.upload_dataset(Path(path), name, resize), progress and self.progress)

    def datasets(self) -> list[Dataset]:
        """The caller's datasets."""
        return self._run(_ops.datasets())

    def create_job(self, dataset_id: str, budget: str | int | None = None, constraints: dict[str, Any] | None = None,
                   tolerance: float | None = None, seed: int | None = None, epochs: int | None = None) -> Job:
        """Submit a synthesis job on a dataset (`budget`: "low", "medium", "high" or seconds)."""
        return self._run(_ops.create_job(dataset_id, budget, constraints, tolerance, seed, epochs))

    def job(self, job_id: str) -> Job:
        """One job."""
        return self._run(_ops.job(job_id))

    def jobs(self, limit: int = 50, offset: int = 0) -> list[Job]:
        """The caller's jobs, newest first."""
        return self._run(_ops.jobs(limit, offset))

    def events(self, job_id: str, after: int = 0) -> list[Event]:
        """A job's events so far, after seq `after`."""
        return self._run(_ops.events(job_id, after))

    def watch(self, job_id: str, progress: bool = True) -> Iterator[Event]:
        """Follow a job's events until it ends, reconnecting after a dropped stream where it left off; the last event
        is the "end" one. Draws a bar of the job's stage, best accuracy and time left."""
        enabled = shown(progress and self.progress)
        state = WatchState(job_id)
        with WatchBar(self.job(job_id) if enabled else None, enabled) as bar:
            while not state.ended:
                error: Exception | None = None
                try:
                    yield from self._stream(state, bar)
                except httpx.TransportError as exc:
                    error = exc
                if not state.ended:
                    time.sleep(state.dropped(error))

    def _stream(self, state: WatchState, bar: WatchBar) -> Iterator[Event]:
        call = state.call()
        attempt = 0
        while True:
            with self._http.stream("GET", call.path, headers=dict(call.headers), timeout=TIMEOUT) as response:
                if response.status_code < 400:
                    for line in response.iter_lines():
                        if (event := state.feed(line)) is not None:
                            bar.update(event)
                            yield event
                    return
                reply = Reply(response.status_code, response.headers, response.read())
            delay = delay_after_reply(reply, attempt, self.retries)
            if delay is None:
                checked(reply)
            time.sleep(delay or 0)
            attempt += 1

    def cancel(self, job_id: str) -> Job:
        """Cancel a job (a running one stops within seconds and keeps its best model)."""
        return self._run(_ops.cancel(job_id))

    def candidates(self, job_id: str) -> list[dict[str, Any]]:
        """A job's search log: every candidate it tried."""
        return self._run(_ops.candidates(job_id))

    def pareto(self, job_id: str) -> list[dict[str, Any]]:
        """A job's Pareto front of accuracy against size and latency."""
        return self._run(_ops.pareto(job_id))

    def model(self, model_id: str) -> Model:
        """One model."""
        return self._run(_ops.model(model_id))

    def download(self, model_id: str, path: str | Path, format: Format = "onnx", progress: bool = True) -> Path:
        """Write a model's ONNX graph (or its native zip) to `path`, streamed; `path`."""
        return self._run(_ops.download(model_id, Path(path), format), progress and self.progress)

    def predict(self, model_id: str, inputs: Sequence[ImageInput]) -> Predictions:
        """Classify images (file paths or bytes) or texts (strings, for a text model)."""
        return self._run(_ops.predict(model_id, inputs))

    def report(self, model_id: str) -> Report:
        """A model's explainability report."""
        return self._run(_ops.report(model_id))

    def explain(self, model_id: str, given: ImageInput, method: str = "integrated-gradients", wait: bool = True,
                timeout: float = 300.0) -> Explanation:
        """Explain one input (a text, or an image path or bytes) by `method`; with `wait`, the worker's answer."""
        return self._run(_ops.explain(model_id, given, method, wait, timeout))
