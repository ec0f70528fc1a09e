"""The body of every error response: an RFC 9457 problem detail."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ValidationIssue(BaseModel):
    """One reason a request is not valid: where, what, and the validator's error type."""

    loc: list[str | int] = Field(description="Where: the part of the request ('body', 'query', ...) and the path.")
    msg: str
    type: str


class Problem(BaseModel):
    """An error (RFC 9457 `application/problem+json`); other members may follow the ones below."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="`urn:netsynth:problem:<slug>` for the API's own errors, else `about:blank`.")
    title: str = Field(description="The HTTP status's standard phrase.")
    status: int
    detail: str
    instance: str = Field(description="The request's path.")
    reason: str | None = Field(default=None, description="Why, as a slug: a rejected dataset's (e.g. 'zip-bomb'), "
                               "the quota exceeded ('quota-active-jobs', 'quota-device-seconds', 'quota-storage'), "
                               "or what a found model lacks ('report-absent', 'image-absent', "
                               "'explanation-absent').")
    errors: list[ValidationIssue] | None = Field(default=None, description="Why a request is not valid (422).")
