"""The OpenAPI document describes what the live API sends: schemathesis fuzzes every operation over a real port.

Each operation gets positive and negative generated cases with the caller's API key, half of them on resources
the caller owns (ready text and image datasets with their files, a finished job with events, candidates and a
Pareto front, a text and an image model with real, tiny ONNX graphs, the text model's explainability report, an
answered explanation of the image model, a second API key to delete, and the caller's key to sign in with), fewer
cases signed in with a session cookie and its CSRF token (a fresh session each, as a case may sign out), and a few
cases without either; the rate limit is raised past what the fuzzer sends. Cookies a response sets are dropped
after each case. Operations that delete run last, so that the others find what they would delete. Four checks run
on every response: no server error, and the status, the content type and the body
are the ones the document gives for the operation.

Uploads and predictions are multipart bodies: schemathesis sends random bytes as the files, so they reach the
validation of datasets and images (and are refused with a documented 422) but never a successful upload or image
prediction; text predictions do succeed. The events route streams SSE only on the finished job, whose stream ends
at once: a live job's stream would last until the job ends.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
import requests
import schemathesis
import uvicorn
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Err, Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy.orm import Session, sessionmaker

from api.app import API_PREFIX
from api.deps import CSRF_HEADER, SESSION_COOKIE
from domain.ingest import TextEncoder
from infra.settings import Settings
from store.apikeys import create_api_key, find_api_key
from store.blobs import FileBlobStore
from store.db import session_scope
from store.explanations import create_explanation, finish_explanation
from store.jobs import append_event, transition
from store.models import (
    BudgetTier,
    Candidate,
    Dataset,
    DatasetStatus,
    Job,
    JobState,
    Modality,
    SearchResult,
    TrainedModel,
    User,
)
from store.reports import save_report
from store.sessions import start_session
from tests.api.conftest import Account

AnyCase = Case[Any]
Operation = APIOperation[Any, Any, Any, Any]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
WITH_KEY_EXAMPLES = 100
"""Cases per operation with the caller's key (an operation without parameters has fewer distinct ones)."""
WITH_COOKIE_EXAMPLES = 25
"""Cases per operation signed in with a session cookie: the operations are those the key's cases explore."""
WITHOUT_KEY_EXAMPLES = 15
"""Cases per operation without a key: past the 401 there is little to explore."""
MIN_CASES = 1_000
NEVER_SUCCEEDS = {
    "POST /api/v1/datasets": "random bytes are never a dataset",
    "POST /api/v1/jobs/{job_id}/cancel": "the one job id of the caller's it is given is of a finished job",
}
"""Operations the fuzzer cannot make succeed with the caller's key, and why; every other one must."""


@pytest.fixture(name="settings")
def unthrottled_settings(settings: Settings) -> Settings:
    """The API fixtures' settings with rate limits the fuzzer's ~100 requests a second per user, and its requests
    without a key or cookie, stay under, and room for one more active job beside the two seeded ones."""
    return settings.model_copy(update={"rate_limit_per_minute": 1_000_000, "rate_limit_burst": 100_000,
                                       "rate_limit_unauthenticated_per_minute": 1_000_000,
                                       "rate_limit_unauthenticated_burst": 100_000, "max_active_jobs_per_user": 3})


@pytest.fixture
def live(app: FastAPI) -> Iterator[str]:
    """The app served by uvicorn on a free local port; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def _onnx(dtype: int, shape: list[int], classes: int) -> bytes:
    """A graph `input` [N, *shape] -> `probabilities` [N, classes]: a softmax over a scaled mean of the input."""
    axes = list(range(1, len(shape) + 1))
    weights = numpy_helper.from_array(np.linspace(-1, 1, classes, dtype=np.float32).reshape(1, classes), "w")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["input"], ["x"], to=TensorProto.FLOAT),
         helper.make_node("ReduceMean", ["x"], ["mean"], axes=axes, keepdims=1),
         helper.make_node("Flatten", ["mean"], ["flat"], axis=1),
         helper.make_node("MatMul", ["flat", "w"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1)],
        "tiny", [helper.make_tensor_value_info("input", dtype, ["n", *shape])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["n", classes])], [weights])
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
                 .SerializeToString())


def _model(job: Job, variant: str, kind: str) -> TrainedModel:
    """A model of `job` taking texts (token ids [8]) or images (8x8 grey), with two classes."""
    preprocessing: dict[str, Any]
    if kind == "text":
        encoder = TextEncoder.fit(["a good film", "a bad film", "fine"], max_length=8, subword_buckets=16,
                                  ngram_buckets=0)
        preprocessing, shape, dtype = {"kind": "text", "encoder": encoder.to_json()}, [8], TensorProto.INT32
    else:
        preprocessing = {"kind": "image", "shape": [8, 8, 1], "resize": "centre-crop"}
        shape, dtype = [8, 8, 1], TensorProto.FLOAT
    spec = {"input": {"shape": shape, "dtype": "int32" if kind == "text" else "float32", "modality": kind}}
    architecture = {"input_shape": shape, "layers": [
        {"name": "logits", "op": "dense", "output_shape": [2], "params": 2, "inputs": ["input"]}]}
    return TrainedModel(job_id=job.id, variant=variant, spec=spec, weights=b"weights", onnx=_onnx(dtype, shape, 2),
                        classes=["neg", "pos"], preprocessing=preprocessing, param_count=2, weights_bytes=7,
                        metrics={"accuracy": 0.5, "tolerance": 0.01, "ratio": 2.0},
                        architecture=architecture if variant == "dense" else None)


def _dataset(owner: User, name: str, blobs: FileBlobStore) -> Dataset:
    """A ready text dataset of 30 texts of each of two classes, its CSV in the blob store."""
    key = blobs.put(io.BytesIO(b"text,label\n" + b"".join(b"film %d,%s\n" % (i, b"neg" if i % 2 else b"pos")
                                                             for i in range(60))), f"datasets/{owner.id.hex}/{name}")
    return Dataset(owner_id=owner.id, name=name, modality=Modality.TEXT, format="csv", filename=f"{name}.csv",
                   classes=["neg", "pos"], class_counts={"neg": 30, "pos": 30}, sample_count=60, size_bytes=900,
                   profile={}, checksum="ab" * 32, blob_key=key, status=DatasetStatus.READY)


def _pictures(owner: User, blobs: FileBlobStore) -> Dataset:
    """A ready image dataset of ten 8x8 grey images of two classes, its npz in the blob store."""
    buffer = io.BytesIO()
    np.savez(buffer, x=np.arange(640, dtype=np.uint8).reshape(10, 8, 8, 1), y=np.arange(10) % 2)
    key = blobs.put(io.BytesIO(buffer.getvalue()), f"datasets/{owner.id.hex}/pictures")
    return Dataset(owner_id=owner.id, name="pictures", modality=Modality.IMAGE, format="npz", filename="p.npz",
                   classes=["0", "1"], class_counts={"0": 5, "1": 5}, sample_count=10, size_bytes=buffer.tell(),
                   profile={"image": {"height": 8, "width": 8, "channels": 1}}, checksum="cd" * 32, blob_key=key,
                   status=DatasetStatus.READY)


def _job(owner: User, dataset: Dataset) -> Job:
    return Job(owner_id=owner.id, dataset_id=dataset.id, budget_tier=BudgetTier.LOW, budget_seconds=600)


def _seed(factory: sessionmaker[Session], owner: User, blobs: FileBlobStore) -> dict[str, list[str]]:
    """Resources of `owner` the fuzzer should also reach, by the path parameter that names them."""
    with session_scope(factory) as s:
        used, spare, pictures = _dataset(owner, "used", blobs), _dataset(owner, "spare", blobs), _pictures(owner, blobs)
        s.add_all([used, spare, pictures])
        s.flush()
        queued, done = _job(owner, used), _job(owner, used)  # queued jobs keep `used` and `pictures` from deletion
        s.add_all([queued, done, _job(owner, pictures)])
        s.flush()
        append_event(s, done, "queued", {"budget_tier": "low"})
        transition(done, JobState.RUNNING)
        transition(done, JobState.SUCCEEDED)
        append_event(s, done, "succeeded", {"accuracy": 0.5})
        models = [_model(done, "dense", "text"), _model(done, "compressed", "image")]
        s.add_all([*models, Candidate(job_id=done.id, genome={"name": "c0"}, metrics={"val_accuracy": 0.5},
                                      cost={"index": 0, "params": 2}),
                   SearchResult(job_id=done.id, summary={}, pareto=[{"params": 2, "accuracy": 0.5}])])
        s.flush()
        save_report(s, done.id, models[0].id, {"version": 1, "images": ["confusion.png"]},
                    {"confusion.png": b"\x89PNG"}, "<!doctype html><p>report</p>")
        explained = create_explanation(s, models[1], "gradcam", image=b"\x89PNG", name="cat.png")
        finish_explanation(s, explained.id, {"input": "cat.png", "map": [[0.5]]}, b"\x89PNG overlay")
        spare_key = create_api_key(s, owner, name="spare").row  # not the caller's own: deleting it leaves that
        return {"dataset_id": [str(used.id), str(spare.id), str(pictures.id)], "index": ["0", "9"],
                "job_id": [str(done.id)],
                "model_id": [str(m.id) for m in models], "key_id": [str(spare_key.id)], "name": ["confusion.png"],
                "explanation_id": [str(explained.id)]}


def _owning(case: AnyCase, ids: dict[str, str]) -> AnyCase:
    """`case` with its body's fields named like `ids` set to them (a job on the caller's dataset)."""
    if isinstance(case.body, dict):
        case.body = {**case.body, **{name: value for name, value in ids.items() if name in case.body}}
    return case


def _strategy(operation: Operation, owned: dict[str, list[str]]) -> st.SearchStrategy[AnyCase]:
    """Positive and negative cases, and as many positive ones on each combination of the caller's resources."""
    names = [parameter.name for parameter in operation.path_parameters]
    combos = [dict(zip(names, ids, strict=True)) for ids in itertools.product(*(owned.get(n, []) for n in names))]
    in_body = {name: ids[0] for name, ids in owned.items()}
    modes = [operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)]
    on_owned = [operation.as_strategy(GenerationMode.POSITIVE, path_parameters=combo).map(
        functools.partial(_owning, ids=in_body)) for combo in combos if combo or (in_body and len(operation.body))]
    return st.one_of(st.one_of(modes), st.one_of(on_owned)) if on_owned else st.one_of(modes)


@dataclass
class Tally:
    """Cases run and failures found, per operation."""

    cases: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, set[int]] = field(default_factory=dict)


def _fuzz(label: str, strategy: st.SearchStrategy[AnyCase], call: Callable[[AnyCase], int], examples: int,
          tally: Tally) -> None:
    """Run `examples` cases drawn from `strategy` through `call`, recording a failure under `label`."""

    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(case=strategy)
    def run(case: AnyCase) -> None:
        tally.cases += 1
        tally.statuses.setdefault(label, set()).add(call(case))

    try:
        run()
    except (Exception, FailureGroup) as exc:  # FailureGroup, schemathesis' report, is no Exception
        tally.failures[label] = str(exc)


def _signed_in(factory: sessionmaker[Session], key: str) -> tuple[dict[str, str], dict[str, str]]:
    """The cookies and headers of a fresh session of `key`: its session cookie and its CSRF token."""
    with session_scope(factory) as s:
        found = find_api_key(s, key)
        assert found is not None
        issued = start_session(s, found, timedelta(hours=1))
        return {SESSION_COOKIE: issued.token}, {CSRF_HEADER: issued.row.csrf_token}


def test_every_operation_answers_as_documented(live: str, account: Account, factory: sessionmaker[Session],
                                               settings: Settings) -> None:
    owned = {**_seed(factory, account.user, FileBlobStore(settings.blob_dir)), "api_key": [account.key]}
    schema = schemathesis.openapi.from_url(f"{live}{API_PREFIX}/openapi.json")
    loaded = list(schema.get_all_operations())
    assert not [result.err() for result in loaded if isinstance(result, Err)]
    operations = [result.ok() for result in loaded if isinstance(result, Ok)]
    operations.sort(key=lambda operation: operation.method.upper() == "DELETE")  # last: others read what they delete
    tally = Tally()
    started = time.monotonic()
    with requests.Session() as http:
        for operation in operations:
            for who, examples, strategy in (
                ("with a key", WITH_KEY_EXAMPLES, _strategy(operation, owned)),
                ("with a cookie", WITH_COOKIE_EXAMPLES, _strategy(operation, owned)),
                ("without a key", WITHOUT_KEY_EXAMPLES, _strategy(operation, {})),
            ):
                def call(case: AnyCase, who: str = who) -> int:
                    cookies, headers = _signed_in(factory, account.key) if who == "with a cookie" else ({}, {})
                    headers = account.auth if who == "with a key" else headers
                    try:
                        return case.call_and_validate(base_url=live, session=http, headers=headers, cookies=cookies,
                                                      checks=CHECKS, timeout=30).status_code
                    finally:
                        http.cookies.clear()  # a sign-in's cookie must not carry over to the next case

                _fuzz(f"{operation.label} ({who})", strategy, call, examples, tally)
    print(f"schemathesis {schemathesis.__version__}: {tally.cases} cases on {len(operations)} operations in "
          f"{time.monotonic() - started:.1f} s")
    assert not tally.failures, "\n\n".join(f"{label}:\n{report}" for label, report in tally.failures.items())
    assert tally.cases >= MIN_CASES
    assert len(tally.statuses) == 3 * len(operations)
    unsuccessful = [operation.label for operation in operations if operation.label not in NEVER_SUCCEEDS
                    and not any(200 <= s < 300 for who in ("with a key", "with a cookie")
                                for s in tally.statuses[f"{operation.label} ({who})"])]
    assert not unsuccessful, f"no case succeeded on {unsuccessful}"


@pytest.mark.parametrize("text", ["Ada\x00", "Ada\ud800"])
def test_text_the_database_cannot_store_is_a_422(live: str, account: Account, text: str) -> None:
    """The fuzzer's first find: PostgreSQL refuses NUL characters (and UTF-8 has no lone surrogates), a 500."""
    r = requests.patch(f"{live}{API_PREFIX}/me", data=json.dumps({"display_name": text}), timeout=30,
                       headers={**account.auth, "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    r = requests.post(f"{live}{API_PREFIX}/datasets", files={"file": ("d.csv", b"text,label\n")},
                      data={"name": "a\x00b"}, headers=account.auth, timeout=30)
    assert r.status_code == 422 and "NUL" in r.json()["detail"], r.text
