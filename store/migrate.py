"""Apply the Alembic migrations in `migrations/` to a database, from code (tests, service start-up)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

ROOT = Path(__file__).resolve().parents[1]
MIGRATIONS = ROOT / "migrations"


def alembic_config(url: str | None = None, connection: Connection | None = None) -> Config:
    """Return an Alembic config for the repository's migrations, targeting `url` or an open `connection`."""
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        config.attributes["url"] = url
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision` (the latest by default)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at `url` down to `revision` (`base` removes every table)."""
    command.downgrade(alembic_config(url), revision)
