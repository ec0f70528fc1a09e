"""Request and response bodies of the API."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


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

    display_name: str = Field(min_length=1, max_length=200)
