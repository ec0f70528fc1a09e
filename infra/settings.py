"""Service settings, read from `NETSYNTH_`-prefixed environment variables (and an optional `.env` file)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from domain.ingest.limits import Limits
from domain.rules import MAX_ATTEMPTS


def blob_url_kind(url: str) -> str:
    """'file' or 's3': the store a NETSYNTH_BLOB_URL names (empty: NETSYNTH_BLOB_DIR; a bare path or file:///path:
    that folder; s3://bucket/prefix); ValueError for anything else."""
    parts = urlsplit(url)
    if parts.scheme == "s3":
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", parts.netloc):
            raise ValueError(f"{url!r} names no valid bucket: use s3://bucket/prefix")
        return "s3"
    if parts.scheme == "file" and parts.netloc in {"", "localhost"} and parts.path:
        return "file"
    if not url or (not parts.scheme and not parts.netloc):
        return "file"
    raise ValueError(f"{url!r} is not a blob store URL: use a path, file:///path or s3://bucket/prefix")


class Settings(BaseSettings):
    """Every knob the service reads; `.env.example` documents each one."""

    model_config = SettingsConfigDict(env_prefix="NETSYNTH_", env_file=".env", extra="ignore")

    database_url: str = "sqlite:///./var/netsynth.db"
    broker_url: str = "filesystem://./var/broker"
    blob_dir: Path = Path("./var/blobs")
    blob_url: str = ""
    s3_endpoint_url: str = ""
    blob_cache_bytes: int = Field(default=4 * 1024**3, ge=0)
    max_upload_bytes: int = Field(default=2 * 1024**3, gt=0)
    min_samples_per_class: int = Field(default=5, ge=1)
    max_classes: int = Field(default=1000, ge=2)
    sql_echo: bool = False
    default_queue: str = Field(default="cpu", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    lease_seconds: float = Field(default=60.0, gt=0)
    broker_poll_seconds: float = Field(default=0.05, gt=0)
    max_attempts: int = Field(default=MAX_ATTEMPTS, ge=1)
    republish_after_s: float = Field(default=300.0, gt=0)
    max_active_jobs_per_user: int = Field(default=2, ge=1)
    max_active_explanations_per_user: int = Field(default=5, ge=1)
    explain_queue: str = Field(default="explain", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    explain_max_attempts: int = Field(default=3, ge=1)
    device_seconds_per_30_days: int = Field(default=30 * 16 * 3600, ge=1)
    storage_bytes_per_user: int = Field(default=20 * 1024**3, ge=1)
    rate_limit_per_minute: int = Field(default=600, ge=1)
    rate_limit_burst: int = Field(default=120, ge=1)
    rate_limit_unauthenticated_per_minute: int = Field(default=60, ge=1)
    rate_limit_unauthenticated_burst: int = Field(default=30, ge=1)
    max_api_keys: int = Field(default=20, ge=1)
    metrics_token: str = ""
    metrics_refresh_s: float = Field(default=60.0, ge=0)
    log_format: Literal["text", "json"] = "text"
    worker_devices: int = Field(default=1, ge=1)
    admin_email: str = "admin@localhost"
    session_hours: float = Field(default=12.0, gt=0, le=24 * 366)
    body_timeout_s: float = Field(default=30.0, gt=0)
    forwarded_allow_ips: str = "127.0.0.1"
    secure_cookies: bool = False
    dashboard_dir: Path | None = None
    compile_cache: Path | None = Path("./var/jax-cache")

    @field_validator("blob_url")
    @classmethod
    def _known_blob_store(cls, value: str) -> str:
        """A NETSYNTH_BLOB_URL naming no store is refused at start, not at the first upload."""
        blob_url_kind(value)
        return value

    @field_validator("dashboard_dir", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object) -> object:
        """An empty NETSYNTH_DASHBOARD_DIR means the default folder (None), not the working directory."""
        return None if value == "" else value

    @field_validator("compile_cache", mode="before")
    @classmethod
    def _off_is_none(cls, value: object) -> object:
        """An empty or "off" NETSYNTH_COMPILE_CACHE turns the persistent compilation cache off (None)."""
        return None if isinstance(value, str) and value.strip().lower() in ("", "off") else value
    tier_low_seconds: int = Field(default=2 * 3600, gt=0)
    tier_medium_seconds: int = Field(default=5 * 3600, gt=0)
    tier_high_seconds: int = Field(default=16 * 3600, gt=0)

    def tier_seconds(self, tier: str) -> int:
        """Device-seconds of the budget tier 'low', 'medium' or 'high' (configurable; 2 / 5 / 16 hours)."""
        seconds: int = getattr(self, f"tier_{tier}_seconds")
        return seconds

    def ingest_limits(self, resize: tuple[int, int] | None = None) -> Limits:
        """The dataset validation limits these settings configure (with an optional declared image resize)."""
        return Limits(max_upload_bytes=self.max_upload_bytes, min_samples_per_class=self.min_samples_per_class,
                      max_classes=self.max_classes, resize=resize)


def get_settings() -> Settings:
    """Return settings freshly read from the environment."""
    return Settings()
