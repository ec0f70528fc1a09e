"""The OpenAPI document's error responses: every status a route can answer, each an `application/problem+json` Problem.

A route lists the domain errors it raises with `problems(...)`; their statuses come from the error table
(api.errors). `ProblemRoute` adds what follows from the route's shape alone: 401 and 429 (a rate exceeded)
behind an API key or the session cookie, 403 where a cookie request asks for a change without its CSRF token, 422
(in place of FastAPI's `application/json` default) when it takes parameters or a body, 400 for a JSON body that
cannot be read, and 500 everywhere. `install_problem_schema` puts the Problem schema into the app's document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import get_flat_params
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from api.deps import AUTHENTICATES, CSRF_HEADER, SAFE_METHODS, get_current_user, get_web_session
from api.errors import PROBLEM_JSON, CsrfRejected, Unauthenticated, entry_for
from api.schemas.problem import Problem
from domain.errors import RateLimited

Responses = dict[int | str, dict[str, Any]]
PROBLEM_SCHEMA = "Problem"
_REF_TEMPLATE = "#/components/schemas/{model}"

UNREADABLE_BODY = 400
"""FastAPI's status for a JSON body it cannot decode at all (bytes that are not UTF-8)."""
SERVER_ERROR = 500
RATE_LIMITED = ("Too many requests: the caller's account (all its API keys and sessions together) past its rate, or, "
                "for requests that do not authenticate, the client's address past theirs: see Retry-After.")
"""Why a route behind an API key or the session cookie answers 429 (`api.deps.limit_rate`, `api.deps.refuse`)."""


def _status(error: type[Exception]) -> int:
    entry = entry_for(error)
    if entry is None:
        raise ValueError(f"{error.__name__} is not in the error table: it would be answered as a 500")
    return entry.status


def _add(responses: Responses, status: int, description: str) -> None:
    """Document `status` as a Problem; a status already there keeps its description and gains this one.

    Entries are replaced, never changed in place: a router's responses are shared by its routes.
    """
    entry = responses.get(status, {})
    known = entry.get("description")
    responses[status] = {
        **entry,
        "description": description if not known or description in known else f"{known} {description}",
        "content": {**entry.get("content", {}), PROBLEM_JSON: {"schema": {"$ref": _REF_TEMPLATE.format(
            model=PROBLEM_SCHEMA)}}},
    }


def problems(errors: Mapping[type[Exception], str]) -> Responses:
    """The `responses=` of a route that raises `errors`, each described by when the route raises it."""
    responses: Responses = {}
    for error, description in errors.items():
        _add(responses, _status(error), description)
    return responses


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any] | None]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


class ProblemRoute(APIRoute):
    """A route whose OpenAPI responses also list the errors its shape implies (the `route_class` of every router)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        responses = dict(self.responses)
        for status, description in self._implied():
            _add(responses, status, description)
        self.responses = dict(sorted(responses.items(), key=lambda item: str(item[0])))

    def _implied(self) -> Iterator[tuple[int, str]]:
        """The statuses this route can answer because of its shape, and why."""
        if {get_current_user, get_web_session} & set(_calls(self.dependant)) or getattr(self.endpoint, AUTHENTICATES,
                                                                                       False):
            yield _status(Unauthenticated), ("No API key or session cookie, or one that is unknown, wrong, revoked or "
                                             "ended.")
            yield _status(RateLimited), RATE_LIMITED
            if (self.methods or set()) - SAFE_METHODS:
                yield _status(CsrfRejected), (f"Signed in with the session cookie, without the session's CSRF token "
                                              f"in {CSRF_HEADER}.")
        if get_flat_params(self.dependant) or self.body_field is not None:
            yield _status(RequestValidationError), "The request is not valid: `errors` says where and why."
        if self.body_field is not None:
            yield UNREADABLE_BODY, "The body cannot be read (it is not UTF-8 text)."
        yield SERVER_ERROR, "An unexpected error; its detail says nothing more."


def install_problem_schema(app: FastAPI) -> None:
    """Add the Problem schema, which every error response refers to, to `app`'s OpenAPI document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            schema = Problem.model_json_schema(ref_template=_REF_TEMPLATE, mode="serialization")
            components = document.setdefault("components", {}).setdefault("schemas", {})
            components.update(schema.pop("$defs", {}))
            components[PROBLEM_SCHEMA] = schema
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
