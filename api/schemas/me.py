"""Bodies of the `/me` routes: the caller's quotas and API keys."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from api.schemas import StorableText, UserOut


class QuotaOut(BaseModel):
    """One quota: how much of it is used, its limit, what is left, and whether an admin set it for this user."""

    used: int
    limit: int
    left: int
    custom: bool = Field(description="True when an admin set this user's limit, false for the service default.")


class QuotasOut(BaseModel):
    """The caller's quotas (over one, a request is refused with 429 and the quota's `reason`)."""

    active_jobs: QuotaOut = Field(description="Jobs queued or running at once (reason `quota-active-jobs`).")
    device_seconds: QuotaOut = Field(description="Device-seconds of the jobs and explanation requests created in "
                                     "the last 30 days: spent by finished ones, the whole budget of queued and "
                                     "running jobs, what queued and running explanations spent plus their hard time "
                                     "limit (reason `quota-device-seconds`).")
    storage_bytes: QuotaOut = Field(description="Bytes of stored datasets and explanation requests (their inputs "
                                    "and answers, until deleted) (reason `quota-storage`).")


class MeOut(UserOut):
    """The caller, with its usage against each quota."""

    quotas: QuotasOut


class ApiKeyCreate(BaseModel):
    """A new API key's name, which says what or who uses it."""

    model_config = ConfigDict(extra="forbid")

    name: StorableText = Field(min_length=1, max_length=200)


class ApiKeyOut(BaseModel):
    """An API key as listed: never its secret, only the prefix it starts with."""

    id: uuid.UUID
    name: str
    prefix: str = Field(description="The key's first characters, to tell keys apart.")
    created_at: datetime
    last_used_at: datetime | None = Field(description="Recorded to the minute: a key used again within a minute of "
                                          "its recorded use keeps that time.")


class ApiKeyCreated(ApiKeyOut):
    """A key just created: `key` is its secret, shown this once and never again."""

    key: str
