"""Service settings, read from `NETSYNTH_`-prefixed environment variables (and an optional `.env` file)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob the service reads; `.env.example` documents each one."""

    model_config = SettingsConfigDict(env_prefix="NETSYNTH_", env_file=".env", extra="ignore")

    database_url: str = "sqlite:///./var/netsynth.db"
    broker_url: str = "filesystem://./var/broker"
    blob_dir: Path = Path("./var/blobs")
    max_upload_bytes: int = Field(default=2 * 1024**3, gt=0)
    min_samples_per_class: int = Field(default=5, ge=1)
    max_classes: int = Field(default=1000, ge=2)
    sql_echo: bool = False


def get_settings() -> Settings:
    """Return settings freshly read from the environment."""
    return Settings()
