"""`AsyncClient`: the netsynth API from asyncio code, over `httpx.AsyncClient`. The operations are `_ops`' (shared
with `Client`); this module only sends their calls, retries, streams and sleeps."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
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
from netsynth.client import TIMEOUT, base_url, headers, partial
from netsynth.types import Dataset, Event, Explanation, Job, Model, Predictions, Report

T = TypeVar("T")


class AsyncClient:
    """`Client`'s asyncio twin: the same methods, awaited (`watch` an async iterator), the same errors."""

    def __init__(self, url: str, api_key: str, *, progress: bool = True, retries: int = 5,
                 timeout: httpx.Timeout | float = TIMEOUT) -> None:
        self.progress, self.retries = progress, max(1, retries)
        self._http = httpx.AsyncClient(base_url=base_url(url), headers=headers(api_key), timeout=timeout)

    async def close(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def _exchange(self, call: Call, progress: bool) -> Reply:
        """Send `call` once; its answer (a download's body written to its sink)."""
        with TransferBar(call.label, None, shown(progress and bool(call.label))) as bar, multipart(call, bar) as parts:
            if call.upload is not None:
                bar.set_total(os.path.getsize(call.upload.path))
            request = self._http.build_request(call.method, call.path, params=call.params, json=call.json,
                                               headers=dict(call.headers), **parts)
            response = await self._http.send(request, stream=True)
            try:
                if call.sink is None or response.status_code >= 400:
                    return Reply(response.status_code, response.headers, await response.aread())
                bar.restart()
                bar.set_total(int(response.headers.get("content-length", 0)) or None)
                part = partial(call.sink)
                with part.open("wb") as out:
                    async for chunk in response.aiter_bytes():
                        out.write(chunk)
                        bar.advance(len(chunk))
                part.replace(call.sink)
                return Reply(response.status_code, response.headers, b"")
            finally:
                await response.aclose()

    async def _send(self, call: Call, progress: bool) -> Reply:
        """Send `call`, retried as `_protocol` says; its successful answer."""
        attempt = 0
        while True:
            try:
                reply = await self._exchange(call, progress)
            except httpx.TransportError as exc:
                await asyncio.sleep(delay_after_failure(call, attempt, exc))
            else:
                delay = delay_after_reply(reply, attempt, self.retries)
                if delay is None:
                    return checked(reply)
                await asyncio.sleep(delay)
            attempt += 1

    async def _run(self, op: Op[T], progress: bool = False) -> T:
        """Carry out an operation of `_ops`."""
        try:
            step = next(op)
            while True:
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    step = op.send(None)
                else:
                    step = op.send(await self._send(step, progress))
        except StopIteration as stop:
            result: T = stop.value
            return result

    async def upload_dataset(self, path: str | Path, name: str | None = None, progress: bool = True,
                             resize: str | None = None) -> Dataset:
        """Upload a dataset file (image zip, .npz, CSV, TSV), streamed from disk; its validated profile."""
        return await self._run(_ops.upload_dataset(Path(path), name, resize), progress and self.progress)

    async def datasets(self) -> list[Dataset]:
        """The caller's datasets."""
        return await self._run(_ops.datasets())

    async def create_job(self, dataset_id: str, budget: str | int | None = None,
                         constraints: dict[str, Any] | None = None, tolerance: float | None = None,
                         seed: int | None = None, epochs: int | None = None) -> Job:
        """Submit a synthesis job on a dataset (`budget`: "low", "medium", "high" or seconds)."""
        return await self._run(_ops.create_job(dataset_id, budget, constraints, tolerance, seed, epochs))

    async def job(self, job_id: str) -> Job:
        """One job."""
        return await self._run(_ops.job(job_id))

    async def jobs(self, limit: int = 50, offset: int = 0) -> list[Job]:
        """The caller's jobs, newest first."""
        return await self._run(_ops.jobs(limit, offset))

    async def events(self, job_id: str, after: int = 0) -> list[Event]:
        """A job's events so far, after seq `after`."""
        return await self._run(_ops.events(job_id, after))

    async def watch(self, job_id: str, progress: bool = True) -> AsyncIterator[Event]:
        """Follow a job's events until it ends, reconnecting after a dropped stream where it left off; the last event
        is the "end" one. Draws a bar of the job's stage, best accuracy and time left."""
        enabled = shown(progress and self.progress)
        state = WatchState(job_id)
        with WatchBar(await self.job(job_id) if enabled else None, enabled) as bar:
            while not state.ended:
                error: Exception | None = None
                try:
                    async for event in self._stream(state, bar):
                        yield event
                except httpx.TransportError as exc:
                    error = exc
                if not state.ended:
                    await asyncio.sleep(state.dropped(error))

    async def _stream(self, state: WatchState, bar: WatchBar) -> AsyncIterator[Event]:
        call = state.call()
        attempt = 0
        while True:
            async with self._http.stream("GET", call.path, headers=dict(call.headers), timeout=TIMEOUT) as response:
                if response.status_code < 400:
                    async for line in response.aiter_lines():
                        if (event := state.feed(line)) is not None:
                            bar.update(event)
                            yield event
                    return
                reply = Reply(response.status_code, response.headers, await response.aread())
            delay = delay_after_reply(reply, attempt, self.retries)
            if delay is None:
                checked(reply)
            await asyncio.sleep(delay or 0)
            attempt += 1

    async def cancel(self, job_id: str) -> Job:
        """Cancel a job (a running one stops within seconds and keeps its best model)."""
        return await self._run(_ops.cancel(job_id))

    async def candidates(self, job_id: str) -> list[dict[str, Any]]:
        """A job's search log: every candidate it tried."""
        return await self._run(_ops.candidates(job_id))

    async def pareto(self, job_id: str) -> list[dict[str, Any]]:
        """A job's Pareto front of accuracy against size and latency."""
        return await self._run(_ops.pareto(job_id))

    async def model(self, model_id: str) -> Model:
        """One model."""
        return await self._run(_ops.model(model_id))

    async def download(self, model_id: str, path: str | Path, format: Format = "onnx", progress: bool = True) -> Path:
        """Write a model's ONNX graph (or its native zip) to `path`, streamed; `path`."""
        return await self._run(_ops.download(model_id, Path(path), format), progress and self.progress)

    async def predict(self, model_id: str, inputs: Sequence[ImageInput]) -> Predictions:
        """Classify images (file paths or bytes) or texts (strings, for a text model)."""
        return await self._run(_ops.predict(model_id, inputs))

    async def report(self, model_id: str) -> Report:
        """A model's explainability report."""
        return await self._run(_ops.report(model_id))

    async def explain(self, model_id: str, given: ImageInput, method: str = "integrated-gradients",
                      wait: bool = True, timeout: float = 300.0) -> Explanation:
        """Explain one input (a text, or an image path or bytes) by `method`; with `wait`, the worker's answer."""
        return await self._run(_ops.explain(model_id, given, method, wait, timeout))
