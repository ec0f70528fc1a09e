"""The error table: each domain error maps to its status, and anything unlisted is an opaque 500."""

from __future__ import annotations

import inspect
import json

import pytest
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

import domain.errors
from api.errors import ERROR_TABLE, PROBLEM_JSON, Unauthenticated, lookup, problem_for
from domain.errors import AppendOnly, InvalidKey, InvalidTransition, NotFound, StoreError


def _body(exc: Exception) -> dict[str, object]:
    response = problem_for(exc, "/api/v1/thing")
    assert response.media_type == PROBLEM_JSON
    body: dict[str, object] = json.loads(bytes(response.body))
    assert body["status"] == response.status_code
    assert body["instance"] == "/api/v1/thing"
    return body


@pytest.mark.parametrize(
    ("exc", "status", "slug"),
    [
        (NotFound("dataset 7 does not exist"), 404, "not-found"),
        (InvalidTransition("succeeded", "running"), 409, "invalid-transition"),
        (AppendOnly("job events are append-only"), 409, "append-only"),
        (InvalidKey("../etc/passwd"), 400, "invalid-key"),
        (Unauthenticated("no key"), 401, "unauthenticated"),
        (RequestValidationError([]), 422, "validation-error"),
    ],
)
def test_table_maps_each_error_to_its_status(exc: Exception, status: int, slug: str) -> None:
    body = _body(exc)
    assert body["status"] == status
    assert body["type"] == f"urn:netsynth:problem:{slug}"


def test_domain_error_detail_is_its_message() -> None:
    assert _body(InvalidTransition("succeeded", "running"))["detail"] == "a job cannot go from 'succeeded' to 'running'"
    assert _body(NotFound("dataset 7 does not exist"))["title"] == "Not Found"


def test_every_store_error_is_in_the_table() -> None:
    declared = {cls for _, cls in inspect.getmembers(domain.errors, inspect.isclass)
                if issubclass(cls, StoreError) and cls is not StoreError}
    assert declared <= ERROR_TABLE.keys(), declared - ERROR_TABLE.keys()


def test_subclasses_inherit_their_base_entry() -> None:
    class DatasetMissing(NotFound):
        pass

    assert lookup(DatasetMissing()) is ERROR_TABLE[NotFound]
    assert _body(DatasetMissing("gone"))["status"] == 404


def test_unauthenticated_carries_a_bearer_challenge() -> None:
    assert problem_for(Unauthenticated("x"), "/").headers["www-authenticate"] == "Bearer"
    invalid = problem_for(Unauthenticated("x", invalid_token=True), "/")
    assert invalid.headers["www-authenticate"] == 'Bearer error="invalid_token"'


def test_http_exceptions_keep_their_status_detail_and_headers() -> None:
    response = problem_for(HTTPException(429, "slow down", headers={"Retry-After": "5"}), "/x")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "5"
    body = json.loads(bytes(response.body))
    assert body == {"type": "about:blank", "title": "Too Many Requests", "status": 429, "detail": "slow down",
                    "instance": "/x"}


@pytest.mark.parametrize("exc", [RuntimeError("password=hunter2"), StoreError("internal"), KeyError("secret")])
def test_unlisted_errors_are_opaque_500s(exc: Exception) -> None:
    body = _body(exc)
    assert body["status"] == 500
    assert body["detail"] == "the server hit an unexpected error"
    assert "hunter2" not in json.dumps(body) and "secret" not in json.dumps(body)
