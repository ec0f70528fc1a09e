"""Request and response bodies of the API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def storable(value: str) -> str:
    """`value` when the database can store it as text; ValueError for a NUL character or a lone surrogate."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


StorableText = Annotated[str, AfterValidator(storable)]
"""A string the database can store (PostgreSQL refuses NUL characters in text)."""


class Health(BaseModel):
    """The service's liveness: `ok` once the database answers."""

    status: str
    database: str


class UserOut(BaseModel):
    """A user as the API shows it."""

    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    email: str
    display_name: str
    created_at: datetime


class UserUpdate(BaseModel):
    """The fields of the current user that the user may change."""

    model_config = ConfigDict(extra="forbid")

    display_name: StorableText = Field(min_length=1, max_length=200)
